package pd_test

// Dispatch against real gRPC servers on loopback: scripted SGLang engines
// whose prefill side remembers the prompts it computed (and reports them as
// cached the next time), so that the prefill policy's learning can be seen.

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

type engine struct {
	sglang.UnimplementedSglangSchedulerServer
	decode bool
	fail   bool // prefill: fail every request

	mu     sync.Mutex
	cached map[string]bool
	reqs   []*sglang.GenerateRequest
}

func key(ids []uint32) string {
	return string(slices.Collect(func(yield func(rune) bool) {
		for _, id := range ids {
			if !yield(rune(id)) {
				return
			}
		}
	}))
}

func (e *engine) Generate(req *sglang.GenerateRequest, out grpc.ServerStreamingServer[sglang.GenerateResponse]) error {
	ids := req.GetTokenized().GetInputIds()
	e.mu.Lock()
	e.reqs = append(e.reqs, req)
	hit := e.cached[key(ids)]
	e.mu.Unlock()
	n := uint32(len(ids))
	if e.decode {
		select { // a decode engine that never gets its room times out
		case <-out.Context().Done():
			return out.Context().Err()
		case <-time.After(20 * time.Millisecond):
		}
		_ = out.Send(&sglang.GenerateResponse{Response: &sglang.GenerateResponse_Chunk{Chunk: &sglang.GenerateStreamChunk{TokenIds: []uint32{7}, PromptTokens: n}}})
		return out.Send(&sglang.GenerateResponse{Response: &sglang.GenerateResponse_Complete{Complete: &sglang.GenerateComplete{
			OutputIds: []uint32{7, 8}, FinishReason: "length", PromptTokens: n, CompletionTokens: 2,
		}}})
	}
	if e.fail {
		return status.Error(codes.Internal, "prefill engine crashed")
	}
	cached := uint32(0)
	if hit {
		cached = n
	}
	e.mu.Lock()
	e.cached[key(ids)] = true
	e.mu.Unlock()
	return out.Send(&sglang.GenerateResponse{Response: &sglang.GenerateResponse_Complete{Complete: &sglang.GenerateComplete{
		OutputIds: []uint32{7}, FinishReason: "length", PromptTokens: n, CachedTokens: cached, CompletionTokens: 1,
	}}})
}

func (e *engine) GetModelInfo(context.Context, *sglang.GetModelInfoRequest) (*sglang.GetModelInfoResponse, error) {
	return &sglang.GetModelInfoResponse{ModelPath: "test/pd"}, nil
}

func (e *engine) requests() []*sglang.GenerateRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.reqs)
}

// start serves e on loopback and returns a connected worker.
func (e *engine) start(t *testing.T, role workers.Role) *workers.Worker {
	t.Helper()
	e.cached = map[string]bool{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	sglang.RegisterSglangSchedulerServer(s, e)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	w, err := workers.Connect(t.Context(), lis.Addr().String(), workers.ConnectOptions{Protocol: workers.ProtocolSGLang, Role: role})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// recorder passes outcomes on to the policy it wraps and keeps them.
type recorder struct {
	policy.Policy
	mu       sync.Mutex
	outcomes []policy.Outcome
}

func (r *recorder) Observe(req *policy.Request, d policy.Decision, o policy.Outcome) {
	r.mu.Lock()
	r.outcomes = append(r.outcomes, o)
	r.mu.Unlock()
	if obs, ok := r.Policy.(policy.Observer); ok {
		obs.Observe(req, d, o)
	}
}

func (r *recorder) seen() []policy.Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.outcomes)
}

type pdFleet struct {
	d                  *pd.Dispatcher
	prefill, decode    *recorder
	prefills, decodes  []*workers.Worker
	prefillEng, decEng []*engine
}

func newFleet(t *testing.T, failPrefill bool) *pdFleet {
	f := &pdFleet{
		prefill: &recorder{Policy: mustPolicy(t, "cache_aware")},
		decode:  &recorder{Policy: mustPolicy(t, "power_of_two")},
	}
	for range 2 {
		pe, de := &engine{fail: failPrefill}, &engine{decode: true}
		f.prefillEng, f.decEng = append(f.prefillEng, pe), append(f.decEng, de)
		f.prefills = append(f.prefills, pe.start(t, workers.RolePrefill))
		f.decodes = append(f.decodes, de.start(t, workers.RoleDecode))
	}
	f.d = pd.New(pd.Config{
		Prefill: f.prefill, Decode: f.decode,
		BootstrapPorts: map[string]int{f.prefills[0].URL(): 7001, f.prefills[1].URL(): 7002},
	})
	return f
}

// run selects and dispatches one request for prompt, reads it to its end
// and waits until both legs have ended and the room is released.
func (f *pdFleet) run(t *testing.T, id string, prompt []uint32) (pd.Decision, []uint32, error) {
	t.Helper()
	preq := &policy.Request{RequestID: id, InputIDs: prompt}
	dec, err := f.d.Select(t.Context(), preq, f.prefills, f.decodes)
	if err != nil {
		t.Fatal(err)
	}
	st, err := f.d.Dispatch(t.Context(), dec, preq, &workers.GenerateRequest{RequestID: id, InputIDs: prompt})
	if err != nil {
		t.Fatal(err)
	}
	var tokens []uint32
	for {
		c, rerr := st.Recv()
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			err = rerr
			break
		}
		tokens = append(tokens, c.TokenIDs...)
	}
	<-st.Done()
	testutil.Eventually(t, "the room to be released", func() bool { return f.d.RoomsInFlight() == 0 })
	return dec, tokens, err
}

func TestDispatchLearnsFromThePrefillLeg(t *testing.T) {
	f := newFleet(t, false)
	prompt := make([]uint32, 64)
	for i := range prompt {
		prompt[i] = uint32(100 + i)
	}

	first, tokens, err := f.run(t, "r1", prompt)
	if err != nil || !slices.Equal(tokens, []uint32{7}) {
		t.Fatalf("first request: %v, %v", tokens, err)
	}
	testutil.Eventually(t, "both observations", func() bool { return len(f.prefill.seen()) == 1 && len(f.decode.seen()) == 1 })
	if o := f.prefill.seen()[0]; o.Err != nil || o.CachedTokens != 0 || o.OutputIDs != nil {
		t.Errorf("prefill outcome %+v, want the prefill engine's report (0 cached, no output)", o)
	}
	if o := f.decode.seen()[0]; o.Err != nil || !slices.Equal(o.OutputIDs, []uint32{7, 8}) {
		t.Errorf("decode outcome %+v", o)
	}

	second, _, err := f.run(t, "r2", prompt)
	if err != nil {
		t.Fatal(err)
	}
	if second.Prefill.Worker != first.Prefill.Worker || second.Prefill.Branch != "cache_hit" || second.Prefill.PredictedCachedTokens != 64 {
		t.Errorf("repeat went to %v (%s, predicted %d), want %v by cache_hit predicting 64",
			second.Prefill.Worker, second.Prefill.Branch, second.Prefill.PredictedCachedTokens, first.Prefill.Worker)
	}
	testutil.Eventually(t, "the second prefill observation", func() bool { return len(f.prefill.seen()) == 2 })
	if o := f.prefill.seen()[1]; o.CachedTokens != 64 {
		t.Errorf("repeat: the prefill engine reported %d cached tokens, want 64", o.CachedTokens)
	}

	// The handoff named the chosen prefill engine, its configured bootstrap
	// port and the room, on both legs.
	idx := slices.Index(f.prefills, second.Prefill.Worker)
	reqs := f.prefillEng[idx].requests()
	dp := reqs[len(reqs)-1].GetDisaggregatedParams()
	if dp.GetBootstrapHost() != "127.0.0.1" || int(dp.GetBootstrapPort()) != 7001+idx || dp.GetBootstrapRoom() != second.Room {
		t.Errorf("disaggregated_params %v, want 127.0.0.1:%d room %d", dp, 7001+idx, second.Room)
	}
	didx := slices.Index(f.decodes, second.Decode.Worker)
	dreqs := f.decEng[didx].requests()
	if got := dreqs[len(dreqs)-1].GetDisaggregatedParams(); got.GetBootstrapRoom() != second.Room {
		t.Errorf("decode leg room %d, want %d", got.GetBootstrapRoom(), second.Room)
	}
}

func TestDispatchFailedPrefillTeachesNothing(t *testing.T) {
	f := newFleet(t, true)
	prompt := make([]uint32, 64)
	for i := range prompt {
		prompt[i] = uint32(500 + i)
	}
	dec, _, err := f.run(t, "r1", prompt)
	var le *workers.LegError
	if !errors.As(err, &le) || le.Leg != "prefill" || status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v, want an UNAVAILABLE prefill LegError", err)
	}
	testutil.Eventually(t, "the prefill observation", func() bool { return len(f.prefill.seen()) == 1 })
	if o := f.prefill.seen()[0]; o.Err == nil {
		t.Errorf("prefill outcome %+v, want the failure", o)
	}
	// cache_aware inserted the prompt when it selected; the failure took it
	// back, so the tree does not claim a prompt no engine computed.
	again, err := f.d.Select(t.Context(), &policy.Request{InputIDs: prompt, DryRun: true}, f.prefills, f.decodes)
	if err != nil {
		t.Fatal(err)
	}
	if again.Prefill.PredictedCachedTokens != 0 {
		t.Errorf("after a failed prefill on %v the tree predicts %d cached tokens on %v, want 0",
			dec.Prefill.Worker, again.Prefill.PredictedCachedTokens, again.Prefill.Worker)
	}
}

package pd_test

// Dispatch against simulated SGLang engines over loopback: what each policy
// observes of its leg, the prefill engine's bootstrap port as the decode
// engine is told it, and a failed prefill that teaches the tree nothing.

import (
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

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

// pdFleet is two prefill and two decode simulated SGLang engines behind a
// dispatcher whose policies record what they observe.
type pdFleet struct {
	d                 *pd.Dispatcher
	prefill, decode   *recorder
	prefills, decodes []*workers.Worker
	prefillSims       []*sim.Process
}

// newFleet starts the fleet; prefillFaults are the prefill engines'.
func newFleet(t *testing.T, prefillFaults sim.Faults) *pdFleet {
	f := &pdFleet{
		prefill: &recorder{Policy: mustPolicy(t, "cache_aware")},
		decode:  &recorder{Policy: mustPolicy(t, "power_of_two")},
	}
	for range 2 {
		cfg := simtest.Config(sim.ProtocolSGLang)
		cfg.Role, cfg.Faults, cfg.BootstrapTimeout = sim.RolePrefill, prefillFaults, time.Second
		ps, pw := simtest.Worker(t, cfg)
		_, dw := pdEngine(t, sim.ProtocolSGLang, sim.RoleDecode)
		f.prefillSims = append(f.prefillSims, ps)
		f.prefills, f.decodes = append(f.prefills, pw), append(f.decodes, dw)
	}
	f.d = pd.New(pd.Config{Prefill: f.prefill, Decode: f.decode})
	return f
}

// run selects and dispatches one request for prompt, reads it to its end
// and waits until both legs have ended and the room is released.
func (f *pdFleet) run(t *testing.T, id string, prompt []uint32) (pd.Pair, []uint32, error) {
	t.Helper()
	preq := &policy.Request{RequestID: id, InputIDs: prompt}
	dec, err := f.d.Select(t.Context(), preq, f.prefills, f.decodes)
	if err != nil {
		t.Fatal(err)
	}
	st, err := f.d.Dispatch(t.Context(), dec, preq, &workers.GenerateRequest{RequestID: id, InputIDs: prompt,
		Sampling: workers.Sampling{MaxNewTokens: ptr(uint32(2)), IgnoreEOS: true}}, pd.Holds{})
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
	f := newFleet(t, sim.Faults{})
	prompt := make([]uint32, 64)
	for i := range prompt {
		prompt[i] = uint32(100 + i)
	}

	first, tokens, err := f.run(t, "r1", prompt)
	if err != nil || len(tokens) != 2 {
		t.Fatalf("first request: %v, %v", tokens, err)
	}
	testutil.Eventually(t, "both observations", func() bool { return len(f.prefill.seen()) == 1 && len(f.decode.seen()) == 1 })
	if o := f.prefill.seen()[0]; o.Err != nil || o.CachedTokens != 0 || o.OutputIDs != nil {
		t.Errorf("prefill outcome %+v, want the prefill engine's report (0 cached, no output)", o)
	}
	if o := f.decode.seen()[0]; o.Err != nil || !slices.Equal(o.OutputIDs, tokens) {
		t.Errorf("decode outcome %+v, want the output %v", o, tokens)
	}

	second, _, err := f.run(t, "r2", prompt)
	if err != nil {
		t.Fatal(err)
	}
	// The prompt but its last page, which the engine computes again.
	if second.Prefill.Worker != first.Prefill.Worker || second.Prefill.Branch != "cache_hit" || second.Prefill.PredictedCachedTokens != 48 {
		t.Errorf("repeat went to %v (%s, predicted %d), want %v by cache_hit predicting 48",
			second.Prefill.Worker, second.Prefill.Branch, second.Prefill.PredictedCachedTokens, first.Prefill.Worker)
	}
	testutil.Eventually(t, "the second prefill observation", func() bool { return len(f.prefill.seen()) == 2 })
	// The engine keeps whole pages and computes at least the last token.
	if o := f.prefill.seen()[1]; o.CachedTokens < 48 || o.CachedTokens > 64 {
		t.Errorf("repeat: the prefill engine reported %d cached tokens of 64", o.CachedTokens)
	}
}

// TestDispatchBootstrapPorts: the decode engine fetches the KV cache from the
// bootstrap port the dispatcher names, which is the table's override where
// there is one, else the one the prefill engine reports.
func TestDispatchBootstrapPorts(t *testing.T) {
	tests := []struct {
		name     string
		reported bool // the prefill engine reports its port
		override func(real int) int
		wantErr  bool
	}{
		{"reported by the engine", true, nil, false},
		{"not reported, given by the table", false, func(real int) int { return real }, false},
		{"the table wins over the engine", true, func(int) int { return closedPort(t) }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := simtest.Config(sim.ProtocolSGLang)
			cfg.Role, cfg.BootstrapTimeout = sim.RolePrefill, time.Second
			cfg.Faults.UnreportedBootstrapPort = !tt.reported
			ps, pw := simtest.Worker(t, cfg)
			ds, dw := pdEngine(t, sim.ProtocolSGLang, sim.RoleDecode)
			ports := &pd.BootstrapPorts{}
			if tt.override != nil {
				ports.Set(pw.Endpoint(), tt.override(ps.Engine().BootstrapPort()))
			}
			f := &pdFleet{prefill: &recorder{Policy: mustPolicy(t, "round_robin")}, decode: &recorder{Policy: mustPolicy(t, "round_robin")},
				prefills: []*workers.Worker{pw}, decodes: []*workers.Worker{dw}}
			f.d = pd.New(pd.Config{Prefill: f.prefill, Decode: f.decode, BootstrapPorts: ports})
			_, _, err := f.run(t, "b", testutil.Tokens(10, 32))
			var le *pd.LegError
			switch {
			case tt.wantErr && (!errors.As(err, &le) || le.Leg != "decode"):
				t.Fatalf("err = %v, want the decode leg to fail", err)
			case !tt.wantErr && err != nil:
				t.Fatal(err)
			}
			fetched := uint64(1)
			if tt.wantErr {
				fetched = 0
			}
			if got := ps.Engine().Stats().RoomsFetched; got != fetched {
				t.Errorf("rooms fetched from the prefill engine: %d, want %d (decode engine waited for %d)", got, fetched, ds.Engine().Stats().RoomWaits)
			}
		})
	}
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	_ = lis.Close()
	return port
}

func TestDispatchFailedPrefillTeachesNothing(t *testing.T) {
	f := newFleet(t, sim.Faults{Unavailable: true})
	prompt := make([]uint32, 64)
	for i := range prompt {
		prompt[i] = uint32(500 + i)
	}
	dec, _, err := f.run(t, "r1", prompt)
	var le *pd.LegError
	if kind, _ := fault.KindOf(err); !errors.As(err, &le) || le.Leg != "prefill" || kind != fault.Unavailable {
		t.Fatalf("err = %v, want an unavailable prefill LegError", err)
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

package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// bigAnswers lets a test client receive answers as large as the router
// sends (prompt log-probabilities of long prompts).
var bigAnswers = grpc.MaxCallRecvMsgSize(256 << 20)

// generateCall runs one non-streaming Generate and returns its error.
func generateCall(ctx context.Context, f *fleet, req *kvgatev1.GenerateRequest) (*kvgatev1.GenerateComplete, error) {
	st, err := f.router.Generate(ctx, req, bigAnswers)
	if err != nil {
		return nil, err
	}
	var done *kvgatev1.GenerateComplete
	for {
		m, err := st.Recv()
		if err != nil {
			if status.Code(err) == codes.OK || err.Error() == "EOF" {
				return done, nil
			}
			return done, err
		}
		if c := m.GetComplete(); c != nil {
			done = c
		}
	}
}

// longPrompt returns n token ids that stay within any vocabulary of 1,000
// ids or more.
func longPrompt(n int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = 1 + uint32(i%997)
	}
	return ids
}

// promptLogprobs asks for the prompt's log-probabilities with the most
// alternatives the router allows.
func promptLogprobs(n int) *kvgatev1.GenerateRequest {
	return &kvgatev1.GenerateRequest{InputIds: longPrompt(n), SamplingParams: &kvgatev1.SamplingParams{
		MaxNewTokens: u32(1), IgnoreEos: true, PromptLogprobs: true, TopLogprobs: 20}}
}

// everyWorkerServes checks that every worker's breaker is closed and that
// Generate succeeds on every worker: round_robin (the fleets' policy) sends
// twice as many requests as there are workers to each in turn.
func everyWorkerServes(t *testing.T, f *fleet) {
	t.Helper()
	for i := range f.sims {
		w, ok := f.reg.Get(f.workerURL(i))
		if !ok {
			t.Fatalf("worker %s is not registered", f.workerURL(i))
		}
		if st := w.Breaker().State(); st != workers.BreakerClosed {
			t.Errorf("worker %s: breaker %s; want closed", w.URL(), st)
		}
	}
	served := map[string]bool{}
	for range 2 * len(f.sims) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		done, err := generateCall(ctx, f, &kvgatev1.GenerateRequest{InputIds: prompt(5, 8),
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2), IgnoreEos: true}})
		cancel()
		if err != nil {
			t.Fatalf("Generate afterwards: %v", err)
		}
		served[done.GetWorker()] = true
	}
	for i := range f.sims {
		if !served[f.workerURL(i)] {
			t.Errorf("Generate afterwards never served by %s (served by %v)", f.workerURL(i), served)
		}
	}
}

// TestLongPromptLogprobsSucceed: prompt log-probabilities of a 40,000-token
// prompt at top_logprobs 20 (5.3 MB on the simulator's wire, beyond gRPC's
// default 4 MiB receive limit) are served, and leave every breaker closed.
// Six requests are enough: when the limit was the router's fault and
// counted against the worker, each failed on both workers, and twelve
// failures opened both breakers (threshold 10).
func TestLongPromptLogprobsSucceed(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 2})
	for i := range 6 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		done, err := generateCall(ctx, f, promptLogprobs(40_000))
		cancel()
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if n := len(done.GetPromptLogprobs()); n != 40_000 {
			t.Fatalf("request %d: %d prompt logprobs; want 40000", i, n)
		}
	}
	everyWorkerServes(t, f)
}

// TestWhatCountsAgainstAWorker: only the engine's own failures count
// against its circuit breaker. A limit of the router's, a request the
// engine refuses as wrong, and an RPC the engine does not implement answer
// the client with a code that says so (never a retryable UNAVAILABLE), as
// often as it takes to open a breaker several times over, and afterwards
// every breaker is closed and Generate works on every worker.
func TestWhatCountsAgainstAWorker(t *testing.T) {
	tests := []struct {
		name string
		o    fleetOptions
		call func(ctx context.Context, f *fleet) error
		want codes.Code
	}{
		{
			name: "an answer beyond the router's receive limit for engines",
			o: fleetOptions{config: func(c *router.Config) {
				c.WorkerDialOptions = []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 10))}
			}},
			call: func(ctx context.Context, f *fleet) error {
				_, err := generateCall(ctx, f, promptLogprobs(2_000))
				return err
			},
			want: codes.ResourceExhausted,
		},
		{
			name: "a request the engine refuses as wrong",
			o:    fleetOptions{sim: func(_ int, c *sim.Config) { c.KVCapacityTokens = 1024 }},
			call: func(ctx context.Context, f *fleet) error {
				_, err := generateCall(ctx, f, &kvgatev1.GenerateRequest{InputIds: prompt(1, 4096),
					SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}})
				return err
			},
			want: codes.InvalidArgument,
		},
		{
			name: "Embed on engines that do not implement it",
			o:    fleetOptions{sim: func(_ int, c *sim.Config) { c.EmbeddingDim = 0 }},
			call: func(ctx context.Context, f *fleet) error {
				_, err := f.router.Embed(ctx, &kvgatev1.EmbedRequest{Inputs: []*kvgatev1.EmbedInput{{InputIds: prompt(1, 8)}}})
				return err
			},
			want: codes.Unimplemented,
		},
		{
			name: "Generate on engines that do not implement it",
			o:    fleetOptions{sim: func(_ int, c *sim.Config) { c.Faults.UnimplementedGenerate = true }},
			call: func(ctx context.Context, f *fleet) error {
				_, err := generateCall(ctx, f, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8)})
				return err
			},
			want: codes.Unimplemented,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.workers = 2
			f := startFleet(t, tc.o)
			threshold := workers.DefaultBreakerConfig().FailureThreshold
			for i := range 3 * threshold {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := tc.call(ctx, f)
				cancel()
				if got := status.Code(err); got != tc.want {
					t.Fatalf("call %d: %v; want %v", i, err, tc.want)
				}
			}
			for _, s := range f.sims {
				s.Engine().SetFaults(sim.Faults{})
			}
			everyWorkerServes(t, f)
		})
	}
}

// TestAnswerBeyondTheEngineLimitIsRefused: a request whose answer could be
// larger than the router accepts from an engine is refused before it is
// sent, with INVALID_ARGUMENT naming what it asked for and the limit; a
// smaller one passes.
func TestAnswerBeyondTheEngineLimitIsRefused(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, config: func(c *router.Config) { c.MaxEngineAnswerBytes = 1 << 20 }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := generateCall(ctx, f, promptLogprobs(8_000))
	st := status.Convert(err)
	for _, want := range []string{"prompt_logprobs for 8000 prompt tokens", "top_logprobs 20", "at most 1048576 bytes"} {
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), want) {
			t.Fatalf("%v; want INVALID_ARGUMENT containing %q", err, want)
		}
	}
	if n := f.sims[0].Engine().Stats().Requests; n != 0 {
		t.Errorf("the engine received %d requests; want none", n)
	}
	if _, err := generateCall(ctx, f, promptLogprobs(2_000)); err != nil {
		t.Fatalf("a request whose answer fits: %v", err)
	}
}

// TestEmbedGoesToWorkersThatHaveIt: in a fleet where one engine lacks Embed,
// every Embed is served by the other, the client never notices, the lacking
// engine is counted once, and Generate still uses both.
func TestEmbedGoesToWorkersThatHaveIt(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 2, sim: func(i int, c *sim.Config) {
		if i == 0 {
			c.EmbeddingDim = 0
		}
	}})
	for i := range 10 {
		resp, err := f.router.Embed(embedCtx(t), &kvgatev1.EmbedRequest{Inputs: []*kvgatev1.EmbedInput{{InputIds: prompt(uint32(1+i), 8)}}})
		if err != nil {
			t.Fatalf("Embed %d: %v", i, err)
		}
		if resp.Worker != f.workerURL(1) {
			t.Fatalf("Embed %d served by %s; want %s", i, resp.Worker, f.workerURL(1))
		}
	}
	if n := counter(t, f, "kvgate_worker_rpc_unimplemented_total", "worker", f.workerURL(0), "rpc", "Embed"); n != 1 {
		t.Errorf("kvgate_worker_rpc_unimplemented_total = %v for the engine without Embed; want 1", n)
	}
	everyWorkerServes(t, f)
}

// TestGenerateSkipsAnEngineWithoutIt: in a fleet where one engine answers
// Generate UNIMPLEMENTED (it serves only embeddings), every Generate is
// served by the other, and the first engine's breaker stays closed.
func TestGenerateSkipsAnEngineWithoutIt(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 2, sim: func(i int, c *sim.Config) { c.Faults.UnimplementedGenerate = i == 0 }})
	for i := range 3 * workers.DefaultBreakerConfig().FailureThreshold {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		done, err := generateCall(ctx, f, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8),
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}})
		cancel()
		if err != nil || done.GetWorker() != f.workerURL(1) {
			t.Fatalf("Generate %d: served by %q, %v; want a completion from %s", i, done.GetWorker(), err, f.workerURL(1))
		}
	}
	f.sims[0].Engine().SetFaults(sim.Faults{})
	everyWorkerServes(t, f)
}

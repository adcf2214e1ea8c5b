package workers_test

// The adapters against the simulated engine, both protocols through one test
// body: what the router sees end to end over real gRPC, and the engine's own
// counters to confirm it saw the same thing.

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// simProtocol is an engine protocol and what its adapter reports of the
// simulated engine startSim serves.
type simProtocol struct {
	name     string
	proto    workers.Protocol
	pageSize int // what Info should report
	// eosIDs and kvCapacity are what Info should report: TensorRT-LLM's
	// protocol carries neither.
	eosIDs     []uint32
	kvCapacity int
	// loads: the protocol has GetLoads (TensorRT-LLM's has none).
	loads bool
}

// simProtocols are the protocols with prefill/decode disaggregation and
// data-parallel ranks: SGLang's and vLLM's.
var simProtocols = []simProtocol{
	{sim.ProtocolSGLang, workers.ProtocolSGLang, 16, []uint32{128001}, 8192, true},
	{sim.ProtocolVLLM, workers.ProtocolVLLM, 16, []uint32{128001}, 8192, true}, // GetServerInfo's block_size
}

// allSimProtocols adds TensorRT-LLM's, for what every protocol has.
var allSimProtocols = append(simProtocols[:len(simProtocols):len(simProtocols)],
	simProtocol{sim.ProtocolTRTLLM, workers.ProtocolTRTLLM, 0, nil, 0, false})

// TestEnginesReportTheirPageSize: both protocols tell the KV page size
// (SGLang's server_args.page_size, vLLM's GetServerInfo block_size), which
// becomes the page size of the router's tree for the engine.
func TestEnginesReportTheirPageSize(t *testing.T) {
	for _, p := range simProtocols {
		t.Run(p.name, func(t *testing.T) {
			cfg := sim.DefaultConfig()
			cfg.Protocol, cfg.TimeScale, cfg.PageSize = p.name, 0, 32
			cfg.Logger = slog.New(slog.DiscardHandler)
			_, w := simtest.Worker(t, cfg)
			if got := w.Info().PageSize; got != 32 {
				t.Errorf("page size %d, want the engine's 32", got)
			}
		})
	}
}

// TestEnginesReportTheirRunningLimit: both protocols tell how many requests
// the engine runs at once (SGLang's server_args.max_running_requests, vLLM's
// GetLoads max_running_requests), the capacity cache_aware judges balance by.
func TestEnginesReportTheirRunningLimit(t *testing.T) {
	for _, p := range allSimProtocols {
		t.Run(p.name, func(t *testing.T) {
			cfg := sim.DefaultConfig()
			cfg.Protocol, cfg.TimeScale, cfg.MaxRunning = p.name, 0, 2
			cfg.Logger = slog.New(slog.DiscardHandler)
			_, w := simtest.Worker(t, cfg)
			if got := workers.ViewOf(w).MaxRunningRequests(); got != 2 {
				t.Errorf("running-request limit %d, want the engine's 2", got)
			}
		})
	}
}

// TestTRTLLMReportsItsInputLimit: TensorRT-LLM's max_input_len is the
// longest prompt the worker is given (SGLang's max_req_input_len, below
// the context).
func TestTRTLLMReportsItsInputLimit(t *testing.T) {
	cfg := simtest.Config(sim.ProtocolTRTLLM)
	cfg.MaxContextLength = 2048
	_, w := simtest.Worker(t, cfg)
	if info := w.Info(); info.MaxInputTokens != 2047 || info.MaxContextLength != 2048 {
		t.Errorf("input limit %d, context %d; want the engine's max_input_len 2047 and max_seq_len 2048", info.MaxInputTokens, info.MaxContextLength)
	}
}

func TestSimConnectAndGenerate(t *testing.T) {
	for _, p := range allSimProtocols {
		t.Run(p.name, func(t *testing.T) {
			srv, w := simtest.Worker(t, simtest.Config(p.name))
			if w.Protocol() != p.proto {
				t.Fatalf("detected %v, want %v", w.Protocol(), p.proto)
			}
			info := w.Info()
			if info.Model != "kvgate-sim-8b" || info.MaxContextLength != 4096 || info.PageSize != p.pageSize ||
				!slices.Equal(info.EOSTokenIDs, p.eosIDs) || info.KVCapacityTokens != p.kvCapacity {
				t.Errorf("Info = %+v", info)
			}

			prompt := testutil.Tokens(1000, 64)
			for i, wantCached := range []bool{false, true} {
				req := &workers.GenerateRequest{
					RequestID: p.name + "-" + string(rune('a'+i)),
					InputIDs:  prompt,
					Sampling:  workers.Sampling{MaxNewTokens: ptr[uint32](8), IgnoreEOS: true, Seed: ptr[int32](3)},
				}
				s, err := w.Backend().Generate(testutil.Context(t, 5*time.Second), req)
				if err != nil {
					t.Fatal(err)
				}
				chunks := drain(t, s)
				fin := chunks[len(chunks)-1].Final
				var streamed []uint32
				for _, c := range chunks {
					streamed = append(streamed, c.TokenIDs...)
				}
				if fin.FinishReason != "length" || fin.CompletionTokens != 8 || len(streamed) != 8 || fin.PromptTokens != 64 {
					t.Errorf("request %d: completion %+v, %d tokens streamed", i, fin, len(streamed))
				}
				if (fin.CachedTokens > 0) != wantCached {
					t.Errorf("request %d: cached_tokens = %d, want cached %v", i, fin.CachedTokens, wantCached)
				}
			}
			if st := srv.Engine().Stats(); st.Completed != 2 || st.Requests != 2 {
				t.Errorf("engine stats: %+v", st)
			}
		})
	}
}

func TestSimFaults(t *testing.T) {
	for _, p := range allSimProtocols {
		t.Run(p.name, func(t *testing.T) {
			srv, w := simtest.Worker(t, simtest.Config(p.name))
			gen := func(id string) (workers.Stream, error) {
				return w.Backend().Generate(testutil.Context(t, 5*time.Second), &workers.GenerateRequest{
					RequestID: id, InputIDs: testutil.Tokens(5, 20),
					Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](16), IgnoreEOS: true},
				})
			}

			// An engine dying mid-stream is UNAVAILABLE, never a short success.
			srv.Engine().SetFaults(sim.Faults{DropAfterTokens: 3})
			s, err := gen("drop")
			if err == nil {
				err = recvUntilError(s)
			}
			if status.Code(err) != codes.Unavailable {
				t.Errorf("dropped stream: %v, want UNAVAILABLE", err)
			}

			// A stalled request shows in the engine's load and can be aborted.
			srv.Engine().SetFaults(sim.Faults{StallAfterTokens: 2})
			ctx, cancel := context.WithCancel(testutil.Context(t, 5*time.Second))
			defer cancel()
			s, err = w.Backend().Generate(ctx, &workers.GenerateRequest{RequestID: "stall", InputIDs: testutil.Tokens(5, 20),
				Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](16), IgnoreEOS: true}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Recv(); err != nil {
				t.Fatal(err)
			}
			l, err := w.Backend().Loads(testutil.Context(t, 5*time.Second))
			switch {
			case !p.loads:
				if !workers.Lacks(workers.RPCGetLoads, err) {
					t.Errorf("Loads of a protocol without GetLoads = %+v, %v; want it to show the RPC lacking", l, err)
				}
			case err != nil || l.Running != 1 || l.UsedTokens == 0 || l.MaxTotalTokens != 8192:
				t.Errorf("Loads with one stalled request = %+v, %v", l, err)
			}
			if err := w.Backend().Abort(testutil.Context(t, 5*time.Second), "stall"); err != nil {
				t.Errorf("Abort: %v", err)
			}
			testutil.Eventually(t, "the abort to reach the engine", func() bool { return srv.Engine().Stats().Aborted == 1 })
			// The aborted stream ends with an "abort" completion, then io.EOF.
			if fin := drain(t, s); fin[len(fin)-1].Final.FinishReason != "abort" {
				t.Errorf("aborted stream's completion = %+v", fin[len(fin)-1].Final)
			}

			// Generate refused at once by an overloaded or draining engine.
			srv.Engine().SetFaults(sim.Faults{Unavailable: true})
			s, err = gen("refused")
			if err == nil {
				err = recvUntilError(s)
			}
			if status.Code(err) != codes.Unavailable {
				t.Errorf("refused request: %v, want UNAVAILABLE", err)
			}
		})
	}
}

// recvUntilError reads s until Recv fails and returns that error; io.EOF
// means the stream ended properly, after its completion.
func recvUntilError(s workers.Stream) error {
	for {
		if _, err := s.Recv(); err != nil {
			return err
		}
	}
}

func TestSimHealthAndLoadMonitors(t *testing.T) {
	srvA, a := simtest.Worker(t, simtest.Config(sim.ProtocolSGLang))
	_, b := simtest.Worker(t, simtest.Config(sim.ProtocolVLLM))
	reg := workers.NewRegistry()
	for _, w := range []*workers.Worker{a, b} {
		if err := reg.Add(w); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{}, 2)
	cfg := workers.HealthConfig{Interval: 2 * time.Millisecond, Timeout: time.Second, FailureThreshold: 2, SuccessThreshold: 2}
	go func() { workers.RunHealthChecks(ctx, reg, cfg, nil); done <- struct{}{} }()
	go func() { workers.RunLoadPolls(ctx, reg, 2*time.Millisecond, nil); done <- struct{}{} }()
	defer func() {
		cancel()
		<-done
		<-done
	}()

	srvA.Engine().SetFaults(sim.Faults{Unhealthy: true})
	testutil.Eventually(t, "the unhealthy engine to be marked unhealthy", func() bool { return !a.Healthy() })
	if !b.Healthy() {
		t.Error("the healthy engine was marked unhealthy too")
	}
	srvA.Engine().SetFaults(sim.Faults{})
	testutil.Eventually(t, "the engine to be marked healthy again", a.Healthy)

	// A request stalled on the engine appears in the polled load.
	srvA.Engine().SetFaults(sim.Faults{StallAfterTokens: 1})
	gctx, gcancel := context.WithCancel(testutil.Context(t, 5*time.Second))
	defer gcancel()
	s, err := a.Backend().Generate(gctx, &workers.GenerateRequest{RequestID: "held", InputIDs: testutil.Tokens(9, 40),
		Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](4), IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the poll to see the running request", func() bool { return a.EngineLoad().Running == 1 })
	if got := a.Load(); got != 1 {
		t.Errorf("Load = %d, want the engine's one request (not ours: nothing was acquired)", got)
	}
}

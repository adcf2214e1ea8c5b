package workers_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestEngineKilledAndRestarted: for a connected worker, an engine killed
// mid-stream is UNAVAILABLE on the stream and on health checks; after the
// engine restarts at the same address the same Worker (its gRPC connection
// reconnects) serves again, with the restarted engine's empty cache.
func TestEngineKilledAndRestarted(t *testing.T) {
	for _, p := range allSimProtocols {
		t.Run(p.name, func(t *testing.T) {
			srv, w := simtest.Worker(t, simtest.Config(p.name))
			srv.Engine().SetFaults(sim.Faults{StallAfterTokens: 1})
			ctx, cancel := context.WithCancel(testutil.Context(t, 5*time.Second))
			defer cancel()
			req := &workers.GenerateRequest{RequestID: "r", InputIDs: testutil.Tokens(5, 40),
				Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](4), IgnoreEOS: true}}
			s, err := w.Backend().Generate(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Recv(); err != nil {
				t.Fatal(err)
			}

			srv.Kill()
			if err := recvUntilError(s); status.Code(err) != codes.Unavailable {
				t.Fatalf("in-flight stream of a killed engine: %v, want UNAVAILABLE", err)
			}
			if err := w.Backend().Health(testutil.Context(t, 5*time.Second)); status.Code(err) != codes.Unavailable {
				t.Fatalf("Health of a killed engine: %v, want UNAVAILABLE", err)
			}

			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "the worker's connection to come back", func() bool { return w.Backend().Health(testutil.Context(t, 5*time.Second)) == nil })
			s, err = w.Backend().Generate(testutil.Context(t, 5*time.Second), req)
			if err != nil {
				t.Fatal(err)
			}
			chunks := drain(t, s)
			if fin := chunks[len(chunks)-1].Final; fin.FinishReason != "length" || fin.CachedTokens != 0 {
				t.Errorf("after restart: completion %+v, want a full generation with nothing cached", fin)
			}
		})
	}
}

// TestRestartedEngineBringsItsOwnLimits: an SGLang engine killed and started
// again at the same address with a KV cache four times larger and more
// running slots accepts longer prompts; once the health checks see it back,
// the worker reports the new max_req_input_len, capacity and running limit
// before it is marked healthy, so no request is held to the old ones.
func TestRestartedEngineBringsItsOwnLimits(t *testing.T) {
	cfg := simtest.Config("sglang")
	cfg.MaxContextLength, cfg.KVCapacityTokens, cfg.MaxRunning = 8192, 1024, 4
	srv, w := simtest.Worker(t, cfg)
	if got := w.Info().MaxInputTokens; got != 1023 {
		t.Fatalf("MaxInputTokens %d at start; want 1023", got)
	}
	flips := make(chan bool, 4)
	var atRecovery workers.ModelInfo
	checkHealth(t, w, workers.HealthConfig{Interval: 5 * time.Millisecond, Timeout: time.Second, FailureThreshold: 1, SuccessThreshold: 1,
		OnChange: func(cw *workers.Worker, healthy bool) {
			if healthy {
				atRecovery = cw.Info()
			}
			flips <- healthy
		}}, nil)

	srv.Kill()
	if healthy := testutil.Receive(t, flips, "the killed engine marked unhealthy"); healthy {
		t.Fatal("first flip was to healthy")
	}
	if err := srv.RestartWith(func(c *sim.Config) { c.KVCapacityTokens, c.MaxRunning = 4096, 8 }); err != nil {
		t.Fatal(err)
	}
	if healthy := testutil.Receive(t, flips, "the restarted engine marked healthy"); !healthy {
		t.Fatal("second flip was to unhealthy")
	}
	if got := atRecovery; got.MaxInputTokens != 4095 || got.KVCapacityTokens != 4096 || got.MaxRunningRequests != 8 || got.Model != cfg.Model {
		t.Errorf("when the worker became healthy again: MaxInputTokens %d, KV capacity %d, running limit %d, model %q; "+
			"want the restarted engine's 4095, 4096 and 8, and the model kept", got.MaxInputTokens, got.KVCapacityTokens, got.MaxRunningRequests, got.Model)
	}
}

// TestRestartedEngineServingAnotherModelStaysOut: an engine restarted at the
// same address serving another model, vocabulary or page size answers its
// health checks, but the worker is not marked healthy again: requests for
// the model it joined with would get the other's answers, and its cache
// mirror would count other pages. It stays out, checked again at every
// passing check and warned about once, and rejoins when the engine serves
// what it joined with again.
func TestRestartedEngineServingAnotherModelStaysOut(t *testing.T) {
	tests := []struct {
		name   string
		change func(*sim.Config)
		says   string
	}{
		{"another model", func(c *sim.Config) { c.Model = "other/model" }, `model "other/model"`},
		{"another page size", func(c *sim.Config) { c.PageSize *= 2 }, "page size"},
		{"another vocabulary", func(c *sim.Config) { c.VocabSize, c.EOSTokenID = 1000, 7 }, "vocab_size 1000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := simtest.Config("sglang")
			srv, w := simtest.Worker(t, cfg)
			logs := &testutil.Logs{Level: slog.LevelDebug}
			flips := make(chan bool, 4)
			checkHealth(t, w, workers.HealthConfig{Interval: 5 * time.Millisecond, Timeout: time.Second, FailureThreshold: 1, SuccessThreshold: 1,
				OnChange: func(_ *workers.Worker, healthy bool) { flips <- healthy }}, logs.Logger())

			srv.Kill()
			if healthy := testutil.Receive(t, flips, "the killed engine marked unhealthy"); healthy {
				t.Fatal("first flip was to healthy")
			}
			if err := srv.RestartWith(tt.change); err != nil {
				t.Fatal(err)
			}
			keptOut := func(level slog.Level) int {
				n := 0
				for _, r := range logs.Records(level) {
					if r.Level == level && strings.Contains(r.Message, "kept out of routing") && strings.Contains(r.Message, tt.says) {
						n++
					}
				}
				return n
			}
			testutil.Eventually(t, "three passing checks of the restarted engine", func() bool { return keptOut(slog.LevelDebug) >= 2 })
			if w.Healthy() || len(flips) > 0 {
				t.Fatalf("the worker was marked healthy while its engine serves %s", tt.says)
			}
			if n := keptOut(slog.LevelWarn); n != 1 {
				t.Errorf("%d warnings that the worker is kept out; want 1", n)
			}
			srv.Kill()
			if err := srv.RestartWith(func(c *sim.Config) { *c = cfg }); err != nil {
				t.Fatal(err)
			}
			if healthy := testutil.Receive(t, flips, "the engine serving its model again marked healthy"); !healthy {
				t.Fatal("second flip was to unhealthy")
			}
			if got := w.Info(); got.Model != cfg.Model || got.PageSize != cfg.PageSize {
				t.Errorf("worker's information %+v; want the model and page size it joined with", got)
			}
		})
	}
}

// TestEngineRestartedBetweenChecks: an engine restarted at its address
// faster than the health checks' failure threshold is never marked
// unhealthy, but its connection comes back; at the next passing check the
// worker takes the new engine's limits, and is kept out of routing if the
// new engine serves another model.
func TestEngineRestartedBetweenChecks(t *testing.T) {
	tests := []struct {
		name     string
		change   func(*sim.Config)
		keptOut  bool
		maxInput int // the worker's input limit once read again
	}{
		{"a larger KV cache", func(c *sim.Config) { c.KVCapacityTokens = 4096 }, false, 4095},
		{"another model", func(c *sim.Config) { c.Model = "other/model" }, true, 1023},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := simtest.Config("sglang")
			cfg.MaxContextLength, cfg.KVCapacityTokens = 8192, 1024
			srv, w := simtest.Worker(t, cfg)
			flips := make(chan bool, 4)
			checkHealth(t, w, workers.HealthConfig{Interval: 5 * time.Millisecond, Timeout: time.Second, FailureThreshold: 1 << 30, SuccessThreshold: 1,
				OnChange: func(_ *workers.Worker, healthy bool) { flips <- healthy }}, nil)

			srv.Kill()
			if err := srv.RestartWith(tt.change); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "the connection to come back", func() bool { return w.Reconnections() > 0 })
			if tt.keptOut {
				if healthy := testutil.Receive(t, flips, "the worker kept out"); healthy {
					t.Fatal("the first flip was to healthy")
				}
			} else {
				testutil.Eventually(t, "the new engine's limits", func() bool { return w.Info().MaxInputTokens == tt.maxInput })
				if len(flips) > 0 || !w.Healthy() {
					t.Error("the worker's health changed; the engine came back before any threshold")
				}
			}
			if got := w.Info().MaxInputTokens; got != tt.maxInput {
				t.Errorf("input limit %d; want %d", got, tt.maxInput)
			}
		})
	}
}

// TestRestartedEngineReadAgainUntilItAnswers: an engine restarted between
// checks that passes its health checks but does not answer GetModelInfo
// yet keeps the worker's old limits, and is asked again at each passing
// check until it answers.
func TestRestartedEngineReadAgainUntilItAnswers(t *testing.T) {
	cfg := simtest.Config("sglang")
	cfg.MaxContextLength, cfg.KVCapacityTokens = 8192, 1024
	srv, w := simtest.Worker(t, cfg)
	logs := &testutil.Logs{Level: slog.LevelDebug}
	checkHealth(t, w, workers.HealthConfig{Interval: 5 * time.Millisecond, Timeout: time.Second, FailureThreshold: 1 << 30, SuccessThreshold: 1},
		logs.Logger())

	srv.Kill()
	if err := srv.RestartWith(func(c *sim.Config) {
		c.KVCapacityTokens = 4096
		c.Faults.RPC.Unimplemented = "GetModelInfo"
	}); err != nil {
		t.Fatal(err)
	}
	notRead := func() int {
		n := 0
		for _, r := range logs.Records(slog.LevelDebug) {
			if strings.Contains(r.Message, "model information not read again") {
				n++
			}
		}
		return n
	}
	testutil.Eventually(t, "two passing checks that could not read the engine's information", func() bool { return notRead() >= 2 })
	if got := w.Info().MaxInputTokens; got != 1023 || !w.Healthy() {
		t.Fatalf("input limit %d, healthy %v; want the old 1023 kept, and the worker still healthy", got, w.Healthy())
	}
	f := srv.Engine().Faults()
	f.RPC.Unimplemented = ""
	srv.Engine().SetFaults(f)
	testutil.Eventually(t, "the restarted engine's limits", func() bool { return w.Info().MaxInputTokens == 4095 })
}

// checkHealth runs the health monitor, with hc and log, over a registry of
// w alone until the test ends.
func checkHealth(t *testing.T, w *workers.Worker, hc workers.HealthConfig, log *slog.Logger) {
	t.Helper()
	reg := workers.NewRegistry()
	if err := reg.Add(w); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		workers.RunHealthChecks(ctx, reg, hc, log)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

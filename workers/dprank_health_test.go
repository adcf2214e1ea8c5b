package workers_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"

	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestDPRanksShareTheirEnginesHealthAndLoads: the rank targets of one
// data-parallel engine whose HealthCheck answers an empty message and which
// lacks GetLoads are judged by one check per round for the engine, all by
// GetModelInfo, all healthy; and GetLoads is asked once for the engine, not
// once per rank nor per round.
func TestDPRanksShareTheirEnginesHealthAndLoads(t *testing.T) {
	for _, p := range simProtocols {
		t.Run(p.name, func(t *testing.T) {
			cfg := sim.DefaultConfig()
			cfg.Protocol, cfg.TimeScale, cfg.TokenizerDir, cfg.VocabSize, cfg.DPSize = p.name, 0, "none", 1000, 3
			cfg.Logger = slog.New(slog.DiscardHandler)
			cfg.Faults.RPC = sim.RPCFaults{HealthEmpty: true, Unimplemented: "GetLoads"}
			srv, err := sim.Start(cfg, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Stop)
			ws := connectAll(t, srv.Addr(), true)
			if len(ws) != 3 {
				t.Fatalf("%d rank targets; want 3", len(ws))
			}
			reg := workers.NewRegistry()
			if err := reg.AddAll(ws...); err != nil {
				t.Fatal(err)
			}
			e := srv.Engine()
			health0, loads0 := e.Calls("HealthCheck"), e.Calls("GetLoads")

			var mu sync.Mutex
			checks, healthAt20 := 0, uint64(0)
			twenty := make(chan struct{})
			hc := workers.HealthConfig{Interval: 5 * time.Millisecond, Timeout: time.Second, FailureThreshold: 1, SuccessThreshold: 1,
				OnCheck: func(*workers.Worker, error) {
					mu.Lock()
					defer mu.Unlock()
					if checks++; checks == 3*20 {
						healthAt20 = e.Calls("HealthCheck") - health0
						close(twenty)
					}
				}}
			// Three rounds of load polls. Each poll may take its round's
			// interval; 10 ms ones timed out on a loaded machine before
			// the engine's Unimplemented came back, and every round then
			// asked again (17 calls in one CI run).
			polls := make(chan struct{}, 3)
			hooks := workers.LoadPollHooks{Polled: func() {
				select {
				case polls <- struct{}{}:
				default:
				}
			}}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() { workers.RunHealthChecks(ctx, reg, hc, nil) })
			wg.Go(func() { workers.RunLoadPollsWith(ctx, reg, 100*time.Millisecond, hooks, nil) })
			deadline := testutil.Context(t, 5*time.Second)
			select {
			case <-twenty:
			case <-deadline.Done():
				t.Fatal("fewer than 20 rounds of health checks")
			}
			for range cap(polls) {
				select {
				case <-polls:
				case <-deadline.Done():
					t.Fatal("fewer than 3 rounds of load polls")
				}
			}
			cancel()
			wg.Wait()
			for _, w := range ws {
				if !w.Healthy() || w.HealthCheckInUse() != "model-info" || w.Implements(workers.RPCGetLoads) {
					t.Errorf("%s: healthy %v, judged by %q, GetLoads implemented %v; want healthy by model-info, lacking GetLoads",
						w.URL(), w.Healthy(), w.HealthCheckInUse(), w.Implements(workers.RPCGetLoads))
				}
			}
			// Rounds see every rank: 60 checks are 20 rounds, one HealthCheck each.
			if n := healthAt20; n < 20 || n > 21 {
				t.Errorf("%d HealthCheck calls in 20 rounds; want one a round for the engine", n)
			}
			if n := e.Calls("GetLoads") - loads0; n > 2 {
				t.Errorf("GetLoads asked %d times; want once (twice if a poll timed out)", n)
			}
		})
	}
}

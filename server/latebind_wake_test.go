package server_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestLateBindingWakesOnFleetChange: requests wait in the router while the
// only engine is full; an engine with room that joins, or one that turns
// healthy again, binds them at once. The load poller cannot be what binds
// them: every engine's GetLoads hangs (bindOnWakesOnly), so its rounds
// record nothing and wake nobody.
func TestLateBindingWakesOnFleetChange(t *testing.T) {
	for _, tc := range []struct {
		name string
		// workers: the full engine first; a second one (4 slots) that
		// is killed before the requests wait, when present.
		workers int
		// change makes an engine with room available: it returns that
		// engine's address.
		change func(t *testing.T, f *fleet) string
	}{
		{"an engine joins", 1, func(t *testing.T, f *fleet) string {
			c := sim.DefaultConfig()
			c.TimeScale, c.MaxRunning, c.Logger = 0, 4, slog.New(slog.DiscardHandler)
			c.Faults.RPC.Stalled = "GetLoads"
			extra, err := sim.Start(c, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(extra.Stop)
			if _, err := f.admin.AddWorker(testutil.Context(t, 5*time.Second), &kvgatev1.AddWorkerRequest{Address: extra.Addr()}); err != nil {
				t.Fatalf("AddWorker: %v", err)
			}
			return "grpc://" + extra.Addr()
		}},
		{"an engine turns healthy", 2, func(t *testing.T, f *fleet) string {
			if err := f.sims[1].Restart(); err != nil {
				t.Fatal(err)
			}
			return f.workerURL(1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleet(t, fleetOptions{workers: tc.workers, healthInterval: 20 * time.Millisecond,
				sim: oneFullEngine, config: bindOnWakesOnly})
			if tc.workers > 1 {
				f.sims[1].Engine().SetFaults(sim.Faults{RPC: sim.RPCFaults{Stalled: "GetLoads"}})
				f.sims[1].Kill()
				testutil.Eventually(t, "the killed engine to be unhealthy", func() bool {
					w, ok := f.reg.Get(f.workerURL(1))
					return ok && !w.Healthy()
				})
			}
			full := f.sims[0].Engine()
			faults := full.Faults()
			faults.RPC.Stalled = "GetLoads"
			full.SetFaults(faults)
			held, release := context.WithCancel(context.Background())
			defer release()
			startStream(t, f, held, 100) // the full engine's one slot

			ctx := testutil.Context(t, 15*time.Second)
			served := sendTwoWaiting(ctx, t, f)
			polls := full.Calls("GetLoads")
			roomy := tc.change(t, f)
			for w := range served {
				if w != roomy {
					t.Errorf("a waiting request was served by %s, want the engine with room %s", w, roomy)
				}
			}
			if n := full.Calls("GetLoads"); n > polls+1 {
				t.Errorf("%d load polls of the full engine meanwhile: only the fleet's change should have bound the requests", n-polls)
			}
			if n := waitObservations(t, f, "engines_full"); n != 2 {
				t.Errorf("kvgate_queue_wait_seconds counted %d waits for full engines, want 2", n)
			}
		})
	}
}

// sendTwoWaiting sends two requests that find every engine full, waits
// until both wait in the router's queue, and returns the workers that
// serve them: the channel is closed once both have ended (a failed one
// is reported and sends nothing).
func sendTwoWaiting(ctx context.Context, t *testing.T, f *fleet) <-chan string {
	t.Helper()
	var wg sync.WaitGroup
	served := make(chan string, 2)
	for i := range 2 {
		wg.Go(func() {
			r, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(uint32(i+2), 8),
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2), IgnoreEos: true}})
			if err != nil {
				t.Errorf("a waiting request: %v", err)
				return
			}
			served <- r.complete.GetWorker()
		})
	}
	testutil.Eventually(t, "both requests to wait in the router", func() bool {
		return gauge(t, f, "kvgate_admission_queue_depth") == 2
	})
	go func() {
		wg.Wait()
		close(served)
	}()
	return served
}

// oneFullEngine makes engine 0 an engine of one slot whose streams stall
// after their first token, so that one held stream fills it, and the
// others engines of four.
func oneFullEngine(i int, c *sim.Config) {
	c.MaxRunning = 4
	if i == 0 {
		c.MaxRunning, c.Faults.StallAfterTokens = 1, 1
	}
}

// bindOnWakesOnly holds requests in the router while engines are full
// (a queue of 4, full engines avoided), polls loads an hour apart (every
// BusyLoadPollInterval while requests wait) and lets a poll take a minute
// (the health check timeout), so that once the test makes every engine's
// GetLoads hang only a wake binds a waiting request: the poller asks each
// engine once, its polls never end within the test, and a round that
// records no figures wakes nobody.
func bindOnWakesOnly(c *router.Config) {
	c.LoadPollInterval = time.Hour
	c.Health.Timeout = time.Minute
	c.Admission.QueueSize = 4
	c.Admission.AvoidFullEngines = true
	c.Reliability.StreamIdleTimeout = 0
}

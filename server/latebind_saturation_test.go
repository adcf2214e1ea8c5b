package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestLateBindingEngineQueue: one engine with a running limit far above
// its load but a KV cache that holds one prompt. A request held running
// fills the cache, so the next one waits in the engine's own queue. With
// Admission.EngineQueueFull a third request waits in the router instead,
// and is bound once ours on the engine have ended; without it, it is sent
// to the engine's queue at once.
func TestLateBindingEngineQueue(t *testing.T) {
	for _, c := range []struct {
		name        string
		engineQueue bool
		inRouter    bool // the third request waited in the router
	}{
		{name: "the engine's queue counts as full: the request waits in the router", engineQueue: true, inRouter: true},
		{name: "only the running limit counts (default): the request joins the engine's queue"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := startFleet(t, fleetOptions{workers: 1,
				sim: func(_ int, sc *sim.Config) {
					sc.MaxRunning, sc.PageSize, sc.KVCapacityTokens = 256, 16, 64
					sc.Faults.StallAfterTokens = 1
				},
				config: func(rc *router.Config) {
					rc.Admission.EngineQueueFull = c.engineQueue
					rc.Reliability.StreamIdleTimeout = 0
				}})
			engine := f.sims[0].Engine()
			w := f.reg.Snapshot()[0]
			stream := func(ctx context.Context, first uint32) {
				t.Helper()
				_, err := f.router.Generate(ctx, &kvgatev1.GenerateRequest{InputIds: prompt(first, 48), Stream: true,
					SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(100), IgnoreEos: true}})
				if err != nil {
					t.Fatal(err)
				}
			}
			holder, stopHolder := context.WithCancel(context.Background())
			defer stopHolder()
			stream(holder, 100)
			testutil.Eventually(t, "the first request running", func() bool { return engine.Stats().Running == 1 })
			queued, stopQueued := context.WithCancel(context.Background())
			defer stopQueued()
			stream(queued, 500)
			testutil.EventuallyState(t, testutil.Patience, "the router polling the engine's queue", func() (bool, string) {
				return w.EngineLoad().Waiting == 1, fmt.Sprintf("polled %+v, engine %+v", w.EngineLoad(), engine.Stats())
			})

			// The third request's first chunk says it was bound and ran.
			third := make(chan error, 1)
			go func() {
				st, err := f.router.Generate(testutil.Context(t, 30*time.Second), &kvgatev1.GenerateRequest{InputIds: prompt(1000, 16),
					Stream: true, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(4), IgnoreEos: true}})
				if err == nil {
					_, err = st.Recv()
				}
				third <- err
			}()
			if c.inRouter {
				testutil.Eventually(t, "the third request waiting in the router", func() bool {
					return waitingInRouter(t, f) == 1
				})
				if n := engine.Stats().Requests; n != 2 {
					t.Errorf("the engine was sent %d requests while its queue was full, want the 2 before", n)
				}
			} else {
				testutil.Eventually(t, "the third request in the engine's queue", func() bool { return engine.Stats().Waiting == 2 })
			}
			// Ending ours lets the engine drain its queue, and with the
			// rule, lets the router bind the third request.
			stopHolder()
			stopQueued()
			if err := <-third; err != nil {
				t.Fatalf("the third request: %v", err)
			}
			if got := waitObservations(t, f, "engines_full") > 0; got != c.inRouter {
				t.Errorf("waited in the router for an engine with room: %v, want %v", got, c.inRouter)
			}
		})
	}
}

// waitingInRouter is the requests kvgate_queue_waiting_requests says wait in the
// router now, over all models.
func waitingInRouter(t *testing.T, f *fleet) float64 {
	t.Helper()
	mfs, err := f.srv.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "kvgate_queue_waiting_requests" {
			for _, m := range mf.GetMetric() {
				n += m.GetGauge().GetValue()
			}
		}
	}
	return n
}

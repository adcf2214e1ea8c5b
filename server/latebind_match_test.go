package server_test

import (
	"context"
	"testing"
	"time"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/server"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestLateBindingMatching: two engines of one slot, each held by a request
// whose prompt the other requests extend; "head" (cached on engine A) and
// then "second" (cached on engine B) wait in the router. When B's slot
// frees, matching (--late-binding-match-window 32) binds "second" there and keeps "head" in
// the router for A, its own cache, and binds it when A frees, counting its
// wait as passed_over. Without matching the head is bound first, and the
// wait mode sends it to A, full: it waits blind in A's own queue while
// "second" takes B.
func TestLateBindingMatching(t *testing.T) {
	for _, c := range []struct {
		name   string
		window int // --late-binding-match-window
		// after B frees: requests waiting in the router, and queued in
		// an engine that was full
		inRouter, inEngine float64
		passed             uint64
	}{
		{name: "matching: the head waits in the router for its cache", window: server.MatchedWindow, inRouter: 1, inEngine: 0, passed: 1},
		{name: "without matching: the head waits in a full engine's queue", window: 0, inRouter: 0, inEngine: 1, passed: 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := startFleet(t, fleetOptions{workers: 2, policy: "cache_aware",
				options: func(o *policy.Options) { o.CacheAware.Mode = policy.ModeWait },
				sim:     func(_ int, sc *sim.Config) { sc.MaxRunning, sc.Faults.StallAfterTokens = 1, 1 },
				config: func(rc *router.Config) {
					rc.Reliability.StreamIdleTimeout = 0
					rc.Admission.MatchWindow = c.window
				}})
			first := make(chan string, 4) // names, as their first chunk comes
			stream := func(ctx context.Context, name string, ids []uint32) {
				go func() {
					st, err := f.router.Generate(ctx, &kvgatev1.GenerateRequest{InputIds: ids, Stream: true,
						SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(100), IgnoreEos: true}})
					if err == nil {
						_, err = st.Recv()
					}
					if err == nil {
						first <- name
					}
				}()
			}
			expect := func(want string) {
				t.Helper()
				select {
				case got := <-first:
					if got != want {
						t.Fatalf("%s got its first token, want %s", got, want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("no first token; want %s's", want)
				}
			}
			holdA, releaseA := context.WithCancel(context.Background())
			defer releaseA()
			holdB, releaseB := context.WithCancel(context.Background())
			defer releaseB()
			waiting, stopWaiting := context.WithCancel(context.Background())
			defer stopWaiting()

			stream(holdA, "holdA", prompt(1, 64))
			expect("holdA")
			stream(holdB, "holdB", prompt(1000, 64))
			expect("holdB")
			if n := queuedInEngines(f); n != 0 {
				t.Fatalf("the holders share an engine (%d queued): the test needs one on each", n)
			}
			stream(waiting, "head", prompt(1, 96))
			testutil.Eventually(t, "head to wait in the router", func() bool { return gauge(t, f, "kvgate_admission_queue_depth") == 1 })
			stream(waiting, "second", prompt(1000, 96))
			testutil.Eventually(t, "second to wait in the router", func() bool { return gauge(t, f, "kvgate_admission_queue_depth") == 2 })

			releaseB()
			expect("second")
			testutil.Eventually(t, "the router's queue to settle", func() bool {
				return gauge(t, f, "kvgate_admission_queue_depth") == c.inRouter && float64(queuedInEngines(f)) == c.inEngine
			})
			releaseA()
			expect("head")
			if n := queuedInEngines(f); float64(n) != c.inEngine {
				t.Errorf("%d requests were sent to an engine that was full, want %v", n, c.inEngine)
			}
			if n := waitObservations(t, f, "passed_over"); n != c.passed {
				t.Errorf("kvgate_queue_wait_seconds counted %d passed_over waits, want %d", n, c.passed)
			}
		})
	}
}

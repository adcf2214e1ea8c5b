package server_test

import (
	"context"
	"testing"
	"time"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestLateBindingWithPrefillDecode: behind a disaggregating router (a
// prefill and a decode engine), with one leg's engine of one slot and
// twelve requests at once, the requests that find that engine full wait in
// the router, not in an engine; then every one completes with both legs
// served, none lost, and neither engine ever had to queue one beyond its
// running-request limit.
//
// Several engines per leg: TestLateBindingPlacesWithinEveryLegsLimit.
func TestLateBindingWithPrefillDecode(t *testing.T) {
	const requests = 12
	for _, tc := range []struct {
		name string
		// fullRole is the role whose engines have one slot.
		fullRole string
	}{
		{"decode engines full", sim.RoleDecode},
		{"prefill engines full", sim.RolePrefill},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleet(t, fleetOptions{workers: 2, pd: true,
				sim: func(_ int, c *sim.Config) {
					// A decode leg waits for its prefill's room longer
					// than the harness's 300 ms: under the race detector
					// a prefill behind others can take that long.
					c.TimeScale, c.MaxRunning, c.BootstrapTimeout = 0.2, 4, 5*time.Second
					if c.Role == tc.fullRole {
						c.MaxRunning = 1
					}
				},
				config: func(c *router.Config) {
					c.Admission.AvoidFullEngines = true
					c.Admission.QueueSize = requests
				}})
			results := sendBurst(testutil.Context(t, 30*time.Second), t, f, requests)

			prefill, decode := f.workerURL(0), f.workerURL(1)
			completed := 0
			for _, r := range results {
				c := r.complete
				switch {
				case c == nil:
					t.Error("a request ended without a completion")
				case c.GetWorker() != decode || c.GetPrefillWorker() != prefill:
					t.Errorf("completion served by decode %q and prefill %q: want %q and %q", c.GetWorker(), c.GetPrefillWorker(), decode, prefill)
				case len(c.GetOutputIds()) != 8:
					t.Errorf("completion with %d tokens, want 8", len(c.GetOutputIds()))
				default:
					completed++
				}
			}
			if completed != requests {
				t.Errorf("%d of %d requests completed with both legs", completed, requests)
			}
			wantLegsWithinLimits(t, f, 1, requests)
			if n := waitObservations(t, f, "engines_full"); n == 0 {
				t.Error("no request waited in the router for an engine with room: the test did not fill the leg")
			}
			if n := gauge(t, f, "kvgate_queue_waiting_requests"); n != 0 {
				t.Errorf("kvgate_queue_waiting_requests is %v after every request ended, want 0", n)
			}
		})
	}
}

// sendBurst sends n requests at once (32-token prompts of three kinds, 8
// tokens each) and returns the results of those that did not fail; a
// failure is reported.
func sendBurst(ctx context.Context, t *testing.T, f *fleet, n int) []result {
	t.Helper()
	return f.generateAll(ctx, t, n, func(i int) *kvgatev1.GenerateRequest {
		return &kvgatev1.GenerateRequest{InputIds: prompt(uint32(i%3+1), 32),
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(8), IgnoreEos: true}}
	})
}

// wantLegsWithinLimits wants no engine of a disaggregated fleet (its first
// prefills engines prefill, the rest decode) to have queued a request
// beyond its running-request limit, and each leg to have served every one
// of the requests.
func wantLegsWithinLimits(t *testing.T, f *fleet, prefills, requests int) {
	t.Helper()
	var prefilled, decoded uint64
	for i, s := range f.sims {
		st := s.Engine().Stats()
		if st.QueuedFull != 0 {
			t.Errorf("engine %d (%s, %d slots) queued %d requests beyond its running-request limit",
				i, s.Engine().Config().Role, s.Engine().Config().MaxRunning, st.QueuedFull)
		}
		if i < prefills {
			prefilled += st.Completed
		} else {
			decoded += st.Completed
		}
	}
	if prefilled != uint64(requests) || decoded != uint64(requests) {
		t.Errorf("the engines completed %d prefill and %d decode legs, want %d of each", prefilled, decoded, requests)
	}
}

package server_test

import (
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestLateBindingPlacesWithinEveryLegsLimit: behind a disaggregating router
// with two engines per leg, of one and two running slots, and more requests
// at once than the slots, late binding with --late-binding-avoid-full
// never sends an engine a request beyond the running-request limit it
// reports, even when several requests are bound at the same moment and see
// the same free places: none of the four engines queues one, and every
// request completes with both legs served.
func TestLateBindingPlacesWithinEveryLegsLimit(t *testing.T) {
	const requests = 48
	for _, tc := range []struct {
		name   string
		policy string
		// slots are the engines' running-request limits: two prefill
		// engines, then two decode engines.
		slots [4]int
	}{
		{"round_robin, 1 and 2 slots on each leg", "round_robin", [4]int{1, 2, 1, 2}},
		{"cache_aware, 1 and 2 slots on each leg", "cache_aware", [4]int{2, 1, 2, 1}},
		{"round_robin, 1 slot everywhere", "round_robin", [4]int{1, 1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleet(t, fleetOptions{workers: 4, pd: true, policy: tc.policy,
				sim: func(i int, c *sim.Config) {
					// See TestLateBindingWithPrefillDecode for the
					// bootstrap timeout.
					c.TimeScale, c.MaxRunning, c.BootstrapTimeout = 0.2, tc.slots[i], 5*time.Second
				},
				config: func(c *router.Config) {
					c.Admission.AvoidFullEngines = true
					c.Admission.QueueSize = requests
				}})
			completed := 0
			for i, r := range sendBurst(testutil.Context(t, 60*time.Second), t, f, requests) {
				if r.complete == nil || len(r.complete.GetOutputIds()) != 8 {
					t.Errorf("request %d ended without a completion of 8 tokens: %v", i, r.complete)
					continue
				}
				completed++
			}
			if completed != requests {
				t.Errorf("%d of %d requests completed", completed, requests)
			}
			wantLegsWithinLimits(t, f, 2, requests)
			if n := waitObservations(t, f, "engines_full"); n == 0 {
				t.Error("no request waited in the router for an engine with room: the test did not fill the legs")
			}
		})
	}
}

package policy_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// BenchmarkDecisionsHeld measures the heap that decisions keep while their
// requests are in flight: the caller holds each Decision until its request
// ends, and cache_aware's in-flight set keeps it too. Each iteration
// selects heldDecisions requests of BenchmarkSelectionByFleetSize's
// workload among the fleet, after a pass over all of them (so the tree
// does not grow), and holds every decision; held-B/decision is the live
// heap they add, over a collection, per decision.
//
//	go test -run '^$' -bench DecisionsHeld -benchtime 3x ./policy/
func BenchmarkDecisionsHeld(b *testing.B) {
	const heldDecisions = 256
	ctx := context.Background()
	for _, name := range []string{"cache_aware", "vllm_cache_aware"} {
		for _, n := range []int{100, 1000} {
			w := newScaleWorkload(n)
			b.Run(fmt.Sprintf("policy=%s/workers=%d", name, n), func(b *testing.B) {
				reg := scaleFleet(b, n)
				p, err := policy.New(name, policy.DefaultOptions())
				if err != nil {
					b.Fatal(err)
				}
				views := workers.Views(reg.Current().Workers)
				obs, _ := p.(policy.Observer)
				// One pass first, so the tree holds every prompt and
				// what the decisions add is theirs alone.
				for _, req := range w.reqs {
					d, err := p.Select(ctx, req, views)
					if err != nil {
						b.Fatal(err)
					}
					if obs != nil {
						obs.Observe(req, d, policy.Outcome{CachedTokens: d.PredictedCachedTokens})
					}
				}
				held := make([]policy.Decision, heldDecisions)
				var total float64
				for b.Loop() {
					clear(held)
					before := testutil.LiveHeap()
					for i := range held {
						req := &policy.Request{InputIDs: w.reqs[i%len(w.reqs)].InputIDs}
						if held[i], err = p.Select(ctx, req, views); err != nil {
							b.Fatal(err)
						}
					}
					total += float64(testutil.LiveHeap()-before) / heldDecisions
					if obs != nil {
						for i, d := range held {
							obs.Observe(&policy.Request{InputIDs: w.reqs[i%len(w.reqs)].InputIDs}, d, policy.Outcome{CachedTokens: d.PredictedCachedTokens})
						}
					}
				}
				b.ReportMetric(total/float64(b.N), "held-B/decision")
			})
		}
	}
}

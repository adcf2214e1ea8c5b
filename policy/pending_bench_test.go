package policy_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// BenchmarkScoredSelectionWhilePending measures a cost- or wait-mode
// selection of BenchmarkSelectionByFleetSize's workload by a caller that
// promises Acquired (the regular dispatcher), with the previous
// selection's decision still pending, as on a busy router: the snapshot
// then reads the pending counts, and the decision is counted until the
// next selection acquires it. Like BenchmarkSelectionByFleetSize it
// reports each selection's thread CPU time, which a loaded machine
// disturbs less than its wall time.
func BenchmarkScoredSelectionWhilePending(b *testing.B) {
	ctx := context.Background()
	for _, mode := range []string{policy.ModeCost, policy.ModeWait} {
		for _, n := range []int{10, 1000} {
			b.Run(fmt.Sprintf("mode=%s/workers=%d", mode, n), func(b *testing.B) {
				w := newScaleWorkload(n)
				reg := scaleFleet(b, n)
				o := policy.DefaultOptions()
				o.CacheAware.Mode = mode
				p, err := policy.NewCacheAware(o)
				if err != nil {
					b.Fatal(err)
				}
				all := reg.Current().Workers
				for i, ids := range w.warmups {
					if _, err := p.Select(ctx, &policy.Request{InputIDs: ids}, workers.Views(all[i:i+1])); err != nil {
						b.Fatal(err)
					}
				}
				views := workers.Views(all)
				reqs := make([]policy.Request, len(w.reqs))
				for i, r := range w.reqs {
					reqs[i] = *r
					reqs[i].Acquires = true
				}
				var prev policy.Decision
				i := 0
				lat := newLatencies()
				runtime.LockOSThread() // for the thread CPU clock
				defer runtime.UnlockOSThread()
				b.ReportAllocs()
				for b.Loop() {
					lat.time(func() {
						d, err := p.Select(ctx, &reqs[i%len(reqs)], views)
						if err != nil {
							b.Fatal(err)
						}
						prev.Acquired()
						prev = d
					})
					i++
				}
				prev.Acquired()
				lat.report(b)
			})
		}
	}
}

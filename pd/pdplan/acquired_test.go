package pdplan_test

import (
	"context"
	"testing"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil/policytest"
	"github.com/kvgate/kvgate/pd/pdplan"
	"github.com/kvgate/kvgate/pipeline"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestPlacerCountsItsDecisionsUntilAcquired is the PD placer's side of
// cache_aware's count of decisions not yet acquired (Request.Acquires),
// as TestPlaceCountsItsDecisionUntilAcquired is the regular dispatcher's:
// a pair placed between another's selection and its Acquire sees the
// other's prefill decision, and once acquired it counts once, in its
// prefill worker's own load (and in the cost and wait modes, its prompt
// once in that worker's PendingPrefill).
//
// Two prefill workers and one decode worker, cache_aware on each side in
// each mode; p1 holds a long prompt, so p0 wins ties by tree size (the
// threshold mode) or by being the earlier candidate (the others). A's
// prefill goes to p0; B, placed in A's window, sees A and goes to p1
// (before, it saw both idle and went to p0 too). C ties them by load and
// goes to p0. With a request of the test's own on p1 (and its prompt's
// prefill), D ties them by load (2 each) and queued prefill and goes to
// p0, unless each placement still counts twice.
func TestPlacerCountsItsDecisionsUntilAcquired(t *testing.T) {
	for _, mode := range []string{policy.ModeThreshold, policy.ModeCost, policy.ModeWait} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			p0 := workers.NewWorker("grpc://p0:1", workers.ProtocolSGLang, workers.RolePrefill, workers.ModelInfo{}, nil, nil)
			p1 := workers.NewWorker("grpc://p1:1", workers.ProtocolSGLang, workers.RolePrefill, workers.ModelInfo{}, nil, nil)
			d0 := workers.NewWorker("grpc://d0:1", workers.ProtocolSGLang, workers.RoleDecode, workers.ModelInfo{}, nil, nil)
			reg := workers.NewRegistry()
			if err := reg.AddAll(p0, p1, d0); err != nil {
				t.Fatal(err)
			}
			o := policy.DefaultOptions()
			o.CacheAware.Mode = mode
			newCA := func() *policy.CacheAware {
				ca, err := policy.NewCacheAware(o)
				if err != nil {
					t.Fatal(err)
				}
				return ca
			}
			prefill := &policytest.InWindow{Policy: newCA()}
			decode := newCA()
			pp := pipeline.New(pipeline.Config{Registry: reg})
			r, _ := pdRoute(t, pp, pdplan.NewMetrics(), prefill, decode)
			long := make([]uint32, 512)
			for i := range long {
				long[i] = 1_000 + uint32(i)
			}
			if _, err := prefill.Select(ctx, &policy.Request{InputIDs: long}, workers.Views([]*workers.Worker{p1})); err != nil {
				t.Fatal(err)
			}
			placer := pdplan.NewPlacer(pp, pdplan.NewMetrics(), r)
			place := func(name string, first uint32, want *workers.Worker) {
				t.Helper()
				ids := make([]uint32, 64)
				for i := range ids {
					ids[i] = first + uint32(i)
				}
				j := &pipeline.Job{ID: name, Route: r, InputIDs: ids, Sampling: &kvgatev1.SamplingParams{}}
				j.Task = pp.Generation(j)
				plan, err := placer.Place(ctx, j, false)
				if err != nil {
					t.Fatalf("placing %s: %v", name, err)
				}
				if got := plan.Legs[0].Worker; got != want {
					t.Errorf("%s's prefill went to %s (%s), want %s", name, got.URL(), plan.Legs[0].Decision.Why(), want.URL())
				}
			}

			prefill.During = func() { place("B", 20_000, p1) }
			place("A", 10_000, p0)
			if prefill.During != nil {
				t.Fatal("B was never placed")
			}
			place("C", 30_000, p0)
			defer p1.Acquire()()
			defer p1.Prefilling(64).End()
			place("D", 40_000, p0)
		})
	}
}

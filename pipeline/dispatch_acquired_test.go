package pipeline

import (
	"context"
	"testing"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil/policytest"
	"github.com/kvgate/kvgate/modeltable"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestPlaceCountsItsDecisionUntilAcquired is the regular dispatcher's
// side of cache_aware's count of decisions not yet acquired
// (Request.Acquires), in each of its modes: a request placed between
// another's selection and that one's Acquire sees it, and once acquired it
// counts once, in its worker's own load (and in the cost and wait modes,
// its prompt once in the worker's PendingPrefill).
//
// w1 holds a long prompt, so w0 wins ties by tree size (the threshold
// mode) or by being the earlier candidate (the others). A goes to w0; B,
// placed in A's window, sees A and goes to w1 (before, it saw both idle
// and went to w0 too). C ties them by load (and queue) and goes to w0.
// With a request of the test's own on w1, of as long a prompt, D ties
// them by load (2 each) and queue (128 tokens each) and goes to w0,
// unless each placement still counts twice.
func TestPlaceCountsItsDecisionUntilAcquired(t *testing.T) {
	for _, mode := range []string{policy.ModeThreshold, policy.ModeCost, policy.ModeWait} {
		t.Run(mode, func(t *testing.T) { testPlaceCountsItsDecisionUntilAcquired(t, mode) })
	}
}

func testPlaceCountsItsDecisionUntilAcquired(t *testing.T, mode string) {
	ctx := context.Background()
	reg := workers.NewRegistry()
	w0 := workers.NewWorker("grpc://w0:1", workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, nil, nil)
	w1 := workers.NewWorker("grpc://w1:1", workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, nil, nil)
	for _, w := range []*workers.Worker{w0, w1} {
		if err := reg.Add(w); err != nil {
			t.Fatal(err)
		}
	}
	o := policy.DefaultOptions()
	o.CacheAware.Mode = mode
	ca, err := policy.NewCacheAware(o)
	if err != nil {
		t.Fatal(err)
	}
	prompt := func(first uint32, n int) []uint32 {
		ids := make([]uint32, n)
		for i := range ids {
			ids[i] = first + uint32(i)
		}
		return ids
	}
	if _, err := ca.Select(ctx, &policy.Request{InputIDs: prompt(1_000, 512)}, workers.Views([]*workers.Worker{w1})); err != nil {
		t.Fatal(err)
	}
	pol := &policytest.InWindow{Policy: ca}
	p := New(Config{Registry: reg})
	table := modeltable.New(modeltable.OneModel, p.RegularPlacer)
	r, _, err := table.Ensure("", func() (modeltable.Spec, error) {
		return modeltable.Spec{Policies: map[workers.Role]policy.Policy{workers.RoleRegular: pol}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	placer := p.RegularPlacer(r)
	place := func(name string, first uint32, want *workers.Worker) {
		t.Helper()
		j := &Job{ID: name, Route: r, InputIDs: prompt(first, 64), Sampling: &kvgatev1.SamplingParams{}}
		j.Task = &generation{s: p, j: j}
		plan, err := placer.Place(ctx, j, false)
		if err != nil {
			t.Fatalf("placing %s: %v", name, err)
		}
		if got := plan.Served(); got != want {
			t.Errorf("%s went to %s (%s), want %s", name, got.URL(), plan.Decision().Why(), want.URL())
		}
	}

	pol.During = func() { place("B", 20_000, w1) }
	place("A", 10_000, w0)
	if pol.During != nil {
		t.Fatal("B was never placed")
	}
	place("C", 30_000, w0)
	defer w1.Acquire()()
	defer w1.Prefilling(64).End()
	place("D", 40_000, w0)
}

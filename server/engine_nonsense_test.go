package server_test

import (
	"testing"
	"time"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestAnEngineReportingNonsenseStillServes: an engine whose model
// information, settings and loads hold figures no engine can mean (a page
// of 1e300 tokens, negative limits and counts, a NaN usage) joins as one
// that reports none of them. cache_aware, in its default mode, keeps
// routing to both engines, every request succeeds, and ListWorkers shows
// the liar's figures as unreported.
func TestAnEngineReportingNonsenseStillServes(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 2, policy: "cache_aware",
		sim: func(i int, c *sim.Config) { c.Faults.ReportsNonsense = i == 0 }})
	ctx := testutil.Context(t, 30*time.Second)
	served := map[string]int{}
	for round := range 3 { // rounds apart, so that load polls land between them
		rs := f.generateAll(ctx, t, 20, func(i int) *kvgatev1.GenerateRequest {
			return &kvgatev1.GenerateRequest{InputIds: prompt(uint32(30*(20*round+i)+1), 64), // ids within the vocabulary (2,059)
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}}
		})
		for _, r := range rs {
			served[r.complete.GetWorker()]++
		}
	}
	liar, honest := f.workerURL(0), f.workerURL(1)
	if served[liar]+served[honest] != 60 || served[liar] == 0 || served[honest] == 0 {
		t.Fatalf("served %v of 60; want every request served, by both engines", served)
	}
	ws, err := f.admin.ListWorkers(ctx, &kvgatev1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws.GetWorkers() {
		if w.GetAddress() != liar {
			continue
		}
		if w.GetPageSize() != 0 || w.GetMaxRunningRequests() != 0 || w.GetKvCapacityTokens() != 0 ||
			w.GetMaxContextLength() != 0 || w.GetEngineRunning() != 0 || !(w.GetKvUsage() >= 0 && w.GetKvUsage() <= 1) {
			t.Fatalf("the liar as ListWorkers shows it: %v; want its figures unreported", w)
		}
		return
	}
	t.Fatalf("ListWorkers does not list %s", liar)
}

package server_test

import (
	"context"
	"testing"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestListWorkersShowsTheEnginesPageSize: each worker shows the KV page size
// its engine reports, and the model the page size the router's tree uses:
// the engines' when the router learns it, the configured one otherwise. A
// person comparing the two sees at once why a worker's events would not
// match page by page.
func TestListWorkersShowsTheEnginesPageSize(t *testing.T) {
	for _, tc := range []struct {
		name       string
		protocol   string
		enginePage int
		configured int // --block-size; 0: learned from the engines
		wantModel  uint32
	}{
		{"vLLM reports block_size, the router learns it", "vllm", 32, 0, 32},
		{"SGLang reports page_size, the router learns it", "sglang", 64, 0, 64},
		{"a configured size wins, the engine's still shown", "vllm", 32, 16, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: tc.protocol, workers: 2, policy: "cache_aware",
				sim: func(i int, c *sim.Config) { bigVocab(i, c); c.PageSize = tc.enginePage },
				options: func(o *policy.Options) {
					if tc.configured > 0 {
						o.CacheAware.BlockSize = tc.configured
					}
				},
				config: func(c *router.Config) { c.LearnBlockSize = tc.configured == 0 }})
			ctx := context.Background()
			ws, err := f.admin.ListWorkers(ctx, &kvgatev1.ListWorkersRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(ws.GetWorkers()) != 2 {
				t.Fatalf("%d workers listed, want 2", len(ws.GetWorkers()))
			}
			for _, w := range ws.GetWorkers() {
				if got := w.GetPageSize(); got != uint32(tc.enginePage) {
					t.Errorf("%s: page_size %d, want the engine's %d", w.GetAddress(), got, tc.enginePage)
				}
			}
			ms, err := f.admin.ListModels(ctx, &kvgatev1.ListModelsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(ms.GetModels()) != 1 || ms.GetModels()[0].GetPageSize() != tc.wantModel {
				t.Fatalf("models %v, want one paged by %d", ms.GetModels(), tc.wantModel)
			}
		})
	}
}

package server_test

import (
	"testing"

	"github.com/kvgate/kvgate/policy"
)

// TestTreeMaxTokensIsTheBudget checks kvgate_tree_max_tokens reports the
// tree's budget (--max-tree-size), so the documented alert
// kvgate_router_cache_tree_size / kvgate_tree_max_tokens > 0.9 divides by
// the bound and not by zero.
func TestTreeMaxTokensIsTheBudget(t *testing.T) {
	tests := []struct {
		name    string
		options func(*policy.Options)
		want    float64
	}{
		{"the default --max-tree-size", nil, float64(policy.DefaultOptions().CacheAware.MaxTreeSize)},
		{"an explicit --max-tree-size", func(o *policy.Options) { o.CacheAware.MaxTreeSize = 4096 }, 4096},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFleet(t, fleetOptions{policy: "cache_aware", options: tt.options})
			if got := gauge(t, f, "kvgate_tree_max_tokens"); got != tt.want {
				t.Fatalf("kvgate_tree_max_tokens = %v, want %v", got, tt.want)
			}
		})
	}
}

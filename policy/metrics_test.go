package policy_test

import (
	"slices"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/policy"
)

// TestCollectorReadsEachModelsPolicy: the tree series are per model, from
// the policies that keep a tree; the speculative series is summed over the
// policies that speculate; a policy with neither adds nothing.
func TestCollectorReadsEachModelsPolicy(t *testing.T) {
	newCacheAware := func() policy.Policy {
		p, err := policy.NewCacheAware(policy.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name   string
		served []policy.Served
		want   []string
	}{
		{"no model", nil, nil},
		{"a policy without a tree", []policy.Served{{Model: "m", Policy: policy.NewRoundRobin()}}, nil},
		{"one tree per model", []policy.Served{
			{Model: "a", Policy: newCacheAware()}, {Model: "b", Policy: policy.NewRoundRobin()}, {Model: "c", Policy: newCacheAware()},
		}, []string{
			`kvgate_cache_speculative_expired_total 0`,
			`kvgate_tree_max_tokens{model="a"} 6.7108864e+07`,
			`kvgate_tree_max_tokens{model="c"} 6.7108864e+07`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := testutil.Series(t, policy.NewCollector(func() []policy.Served { return tt.served }),
				"kvgate_tree_max_tokens", "kvgate_cache_speculative_expired_total")
			if !slices.Equal(got, tt.want) {
				t.Errorf("series:\n%q\nwant:\n%q", got, tt.want)
			}
		})
	}
}

package cache

import (
	"slices"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
)

// TestCollectorSumsTheCaches: the tokenizer cache series are the sum over
// the caches served, and absent when there is no tokenizer at all.
func TestCollectorSumsTheCaches(t *testing.T) {
	tests := []struct {
		name  string
		stats []Stats
		want  []string
	}{
		{"no tokenizer: no series", nil, nil},
		{"one model's cache", []Stats{{L0Hits: 3, L1Hits: 1, L1HitBytes: 40}}, []string{
			`kvgate_tokenizer_cache_hits_total{level="l0"} 3`,
			`kvgate_tokenizer_cache_hits_total{level="l1"} 1`,
			`kvgate_tokenizer_cache_l1_hit_bytes_total 40`,
		}},
		{"two models' caches, summed", []Stats{{L0Hits: 3, L1HitBytes: 40}, {L0Hits: 2, L1Hits: 5, L1HitBytes: 2}}, []string{
			`kvgate_tokenizer_cache_hits_total{level="l0"} 5`,
			`kvgate_tokenizer_cache_hits_total{level="l1"} 5`,
			`kvgate_tokenizer_cache_l1_hit_bytes_total 42`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := testutil.Series(t, NewCollector(func() []Stats { return tt.stats }),
				"kvgate_tokenizer_cache_hits_total", "kvgate_tokenizer_cache_l1_hit_bytes_total")
			if !slices.Equal(got, tt.want) {
				t.Errorf("series:\n%q\nwant:\n%q", got, tt.want)
			}
		})
	}
}

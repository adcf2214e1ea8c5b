package policy

import (
	"maps"
	"testing"
)

// TestMatches is Decision.Matched read by URL: positions through the shared
// index, unavailable candidates through their own map, 0 for anything else
// and on nil.
func TestMatches(t *testing.T) {
	index := map[string]int{"a": 0, "b": 1, "c": 2}
	for _, tc := range []struct {
		name string
		m    *Matches
		want map[string]int
	}{
		{"nil", nil, nil},
		{"positions", &Matches{index: index, tokens: []int{16, 0, 48}}, map[string]int{"a": 16, "b": 0, "c": 48}},
		{"no tokens", &Matches{index: index}, map[string]int{"a": 0, "b": 0, "c": 0}},
		{"unavailable", &Matches{index: index, tokens: []int{0, 32, 0}, other: map[string]int{"d": 64}},
			map[string]int{"a": 0, "b": 32, "c": 0, "d": 64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for url, want := range tc.want {
				if got := tc.m.Of(url); got != want {
					t.Errorf("Of(%s) = %d, want %d", url, got, want)
				}
			}
			if got := tc.m.Of("not a candidate"); got != 0 {
				t.Errorf("Of(not a candidate) = %d, want 0", got)
			}
			if got := tc.m.Len(); got != len(tc.want) {
				t.Errorf("Len = %d, want %d", got, len(tc.want))
			}
			if got := tc.m.Map(); !maps.Equal(got, tc.want) {
				t.Errorf("Map = %v, want %v", got, tc.want)
			}
		})
	}
}

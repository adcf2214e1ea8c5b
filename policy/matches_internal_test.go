package policy

import (
	"maps"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/workers"
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

// TestIndexCache: the last index is reused for the same workers and for
// other Worker values with the same URLs (without calling added), and
// rebuilt, calling added for each worker, when the URLs differ.
func TestIndexCache(t *testing.T) {
	mk := func(urls ...string) []workers.View {
		var ws []workers.View
		for _, u := range urls {
			ws = append(ws, workers.ViewOf(workers.NewWorker(u, workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, nil, nil)))
		}
		return ws
	}
	ab := mk("grpc://a:1", "grpc://b:1")
	var c indexCache
	var added []string
	of := func(ws []workers.View) *workerIndex {
		return c.of(ws, func(w workers.View) { added = append(added, w.URL()) })
	}
	for _, tc := range []struct {
		name      string
		ws        []workers.View
		wantAdded []string
		wantPos   map[string]int
	}{
		{"first list", ab, []string{"grpc://a:1", "grpc://b:1"}, map[string]int{"grpc://a:1": 0, "grpc://b:1": 1}},
		{"same workers, another slice", slices.Clone(ab), nil, map[string]int{"grpc://a:1": 0, "grpc://b:1": 1}},
		{"same URLs, other workers", mk("grpc://a:1", "grpc://b:1"), nil, map[string]int{"grpc://a:1": 0, "grpc://b:1": 1}},
		{"other order", []workers.View{ab[1], ab[0]}, []string{"grpc://b:1", "grpc://a:1"}, map[string]int{"grpc://b:1": 0, "grpc://a:1": 1}},
		{"one fewer", ab[:1], []string{"grpc://a:1"}, map[string]int{"grpc://a:1": 0}},
	} {
		added = nil
		x := of(tc.ws)
		if !slices.Equal(added, tc.wantAdded) {
			t.Errorf("%s: added %v, want %v", tc.name, added, tc.wantAdded)
		}
		if !maps.Equal(x.pos, tc.wantPos) || !slices.Equal(x.ws, tc.ws) || x.roster.Len() != len(tc.ws) {
			t.Errorf("%s: index %v of %d workers, want %v", tc.name, x.pos, len(x.ws), tc.wantPos)
		}
	}
}

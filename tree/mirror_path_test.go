package tree

import (
	"slices"
	"testing"
)

// TestMirrorRemoveGoesOnFromThePathLeft: an engine evicting a chain leaf
// first, a block per batch, each batch also storing a page of another
// chain (so the chain Store caches is elsewhere), costs the removals one
// walk up the parents, not one per batch: each removal after the first
// finds its block at the end of the path the one before left.
func TestMirrorRemoveGoesOnFromThePathLeft(t *testing.T) {
	const n = 40
	m := NewMirror(1, 1000)
	var old []MirrorBlock
	for i := range int64(n) {
		old = append(old, MirrorBlock{Hash: 1 + i, Tokens: []uint32{uint32(i)}})
	}
	if _, _, err := m.Store(0, false, old); err != nil {
		t.Fatal(err)
	}
	parent, hasParent := int64(0), false
	for i := n - 1; i >= 0; i-- {
		// The new chain's next page: the cached chain is the new one.
		h := int64(1000 + i)
		if _, _, err := m.Store(parent, hasParent, []MirrorBlock{{Hash: h, Tokens: []uint32{7}}}); err != nil {
			t.Fatal(err)
		}
		parent, hasParent = h, true
		runs := m.Remove([]int64{old[i].Hash})
		want := make([]uint32, i+1)
		for k := range want {
			want[k] = uint32(k)
		}
		if len(runs) != 1 || runs[0].Pages != 1 || !slices.Equal(runs[0].Path, want) {
			t.Fatalf("removing block %d: %v, want one page, path %v", i+1, runs, want)
		}
		if i < n-1 && len(m.up) != 0 {
			t.Fatalf("removing block %d walked up %d blocks for its path; the removal before left it", i+1, len(m.up))
		}
	}
}

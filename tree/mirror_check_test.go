package tree

import (
	"math"
	"testing"
)

// TestMirrorRepeat: a chain that repeats a hash, or names its parent's, is
// found, and the hash reported is the first repeat in the chain's order
// (what the error names), however the hashes sort.
func TestMirrorRepeat(t *testing.T) {
	tests := []struct {
		name      string
		parent    int64
		hasParent bool
		hashes    []int64
		want      int64
		dup       bool
	}{
		{"empty", 0, false, nil, 0, false},
		{"one block", 0, false, []int64{5}, 0, false},
		{"one block under its parent", 4, true, []int64{5}, 0, false},
		{"a block naming itself as parent", 5, true, []int64{5}, 5, true},
		{"distinct", 0, false, []int64{9, -3, 7, 0, 1 << 62}, 0, false},
		{"a parent of 0 is a hash like another", 0, true, []int64{3, 0}, 0, true},
		{"no parent: 0 is free", 0, false, []int64{3, 0}, 0, false},
		{"adjacent repeat", 0, false, []int64{1, 2, 2, 3}, 2, true},
		{"the first repeat in order, not the least", 0, false, []int64{9, 1, 9, 1}, 9, true},
		{"a repeat of the parent comes before a later one", 7, true, []int64{4, 4, 7}, 4, true},
		{"the parent repeated late", 7, true, []int64{4, 5, 7}, 7, true},
		{"a long chain, distinct", 0, false, span(1, 5000), 0, false},
		{"a long chain repeating its first hash last", 0, false, append(span(1, 5000), 1), 1, true},
		{"a long chain repeating its parent", 5000, true, span(1, 5001), 5000, true},
		{"a short chain after long ones", 0, false, []int64{1, 2, 3}, 0, false},
		{"a short chain with a repeat after long ones", 0, false, []int64{3, 1, 3}, 3, true},
	}
	// One mirror answers every case in turn, as one mirror checks an
	// engine's chains one after another: what a chain left in the
	// scratch set must not count for the next.
	shared := NewMirror(1, 100)
	for _, tt := range tests {
		for _, m := range []*Mirror{NewMirror(1, 100), shared} {
			var blocks []MirrorBlock
			for _, h := range tt.hashes {
				blocks = append(blocks, MirrorBlock{Hash: h, Tokens: []uint32{1}})
			}
			order := append([]int64(nil), tt.hashes...)
			got, dup := m.repeat(tt.parent, tt.hasParent, blocks)
			if got != tt.want || dup != tt.dup {
				t.Fatalf("%s: repeat = %d, %v; want %d, %v", tt.name, got, dup, tt.want, tt.dup)
			}
			for i, b := range blocks {
				if b.Hash != order[i] {
					t.Fatalf("%s: repeat reordered the chain", tt.name)
				}
			}
		}
	}
	// The set's stamp wrapping around starts it afresh: the slots the
	// first chain stamped must not count when the stamp comes round again.
	m := NewMirror(1, 100)
	chain := []MirrorBlock{{Hash: 1, Tokens: []uint32{1}}, {Hash: 2, Tokens: []uint32{1}}}
	for i := range 3 {
		if h, dup := m.repeat(0, false, chain); dup {
			t.Fatalf("call %d: repeat = %d, true at stamp %d; want none", i, h, m.dups.gen)
		}
		if i == 0 {
			m.dups.gen = math.MaxUint32
		}
	}
}

// span returns the hashes lo..hi-1.
func span(lo, hi int64) []int64 {
	var hs []int64
	for h := lo; h < hi; h++ {
		hs = append(hs, h)
	}
	return hs
}

package tree

import "testing"

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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMirror(1, 100)
			var blocks []MirrorBlock
			for _, h := range tt.hashes {
				blocks = append(blocks, MirrorBlock{Hash: h, Tokens: []uint32{1}})
			}
			order := append([]int64(nil), tt.hashes...)
			got, dup := m.repeat(tt.parent, tt.hasParent, blocks)
			if got != tt.want || dup != tt.dup {
				t.Fatalf("repeat = %d, %v; want %d, %v", got, dup, tt.want, tt.dup)
			}
			for i, b := range blocks {
				if b.Hash != order[i] {
					t.Fatalf("repeat reordered the chain: %v", blocks)
				}
			}
		})
	}
}

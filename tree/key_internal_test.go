package tree

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestKeyReadsEveryToken checks that a page's key is a function of every
// token of it: equal pages in different arrays share a key, and changing
// any one token changes it (a key that read only part of the page would
// make siblings that differ elsewhere collide, each lookup then comparing
// them one by one).
func TestKeyReadsEveryToken(t *testing.T) {
	tr, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 3, 16, 64, 512} {
		page := make([]uint32, n)
		for i := range page {
			page[i] = r.Uint32()
		}
		k := tr.key(page)
		if got := tr.key(slices.Clone(page)); got != k {
			t.Fatalf("%d tokens: a copy of the page keys %#x, the page %#x", n, got, k)
		}
		for i := range page {
			for _, bit := range []uint32{1, 1 << 8, 1 << 16, 1 << 31} {
				changed := slices.Clone(page)
				changed[i] ^= bit
				if tr.key(changed) == k {
					t.Fatalf("%d tokens: flipping bit %#x of token %d leaves the key %#x", n, bit, i, k)
				}
			}
		}
	}
}

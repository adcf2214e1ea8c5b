package tree

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestNthSmallest checks Evict's selection against sorting, on random
// inputs with many duplicates and on sorted and reversed ones.
func TestNthSmallest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for n := 1; n < 300; n++ {
		for shape := range 3 {
			a := make([]uint64, n)
			for i := range a {
				a[i] = [3]uint64{rng.Uint64N(uint64(n)/4 + 1), uint64(i), uint64(n - i)}[shape]
			}
			sorted := slices.Sorted(slices.Values(a))
			k := rng.IntN(n)
			if got := nthSmallest(a, k); got != sorted[k] {
				t.Fatalf("n %d, shape %d: element %d is %d, want %d", n, shape, k, got, sorted[k])
			}
		}
	}
}

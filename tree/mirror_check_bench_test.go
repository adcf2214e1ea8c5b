package tree

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkMirrorRepeat measures the check for a repeated hash of one
// stored chain of distinct random hashes (an engine's prompt, one block a
// page), warm, and cold: with the processor's nearer caches swept between
// chains (untimed), as a router's other work sweeps them between one
// engine's batches.
func BenchmarkMirrorRepeat(b *testing.B) {
	for _, cold := range []bool{false, true} {
		for _, n := range []int{64, 512} {
			b.Run(fmt.Sprintf("blocks=%d,cold=%v", n, cold), func(b *testing.B) {
				m := NewMirror(16, 1<<20)
				rng := rand.New(rand.NewPCG(1, uint64(n)))
				blocks := make([]MirrorBlock, n)
				var sweep []uint64
				if cold {
					sweep = make([]uint64, 1<<20) // 8 MiB: twice the L2
				}
				for b.Loop() {
					b.StopTimer()
					for i := range blocks {
						blocks[i].Hash = rng.Int64()
					}
					for i := range sweep {
						sweep[i]++
					}
					b.StartTimer()
					if h, dup := m.repeat(rng.Int64(), true, blocks); dup {
						b.Fatalf("repeat found %d", h)
					}
				}
			})
		}
	}
}

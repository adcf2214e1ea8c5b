package cache

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// heapGrowth reports how much live heap fill leaves behind.
func heapGrowth(fill func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fill()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return after.HeapAlloc - before.HeapAlloc
}

// TestAccountingTracksHeap fills each level with many entries and compares
// the accounted bytes with the heap they really hold. The accounting is meant
// to be conservative: not below the real cost, and not wildly above it.
func TestAccountingTracksHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("fills caches with a few MB")
	}
	tok := &fakeTok{added: chatmlTokens()[:2]}
	for _, pieceLen := range []int{8, 60, 400} {
		t.Run(fmt.Sprintf("L1/piece=%d", pieceLen), func(t *testing.T) {
			var c *Cache
			real := heapGrowth(func() {
				c = New(tok, tok.added, Config{L1Enabled: true, L1MaxBytes: 1 << 30})
				r := rand.New(rand.NewPCG(1, uint64(pieceLen)))
				for i := range 3000 {
					var b strings.Builder
					fmt.Fprintf(&b, "<|im_start|>system %d<|im_end|>", i%50) // shared prefixes: fan-out
					for range 1 + r.IntN(6) {
						fmt.Fprintf(&b, "<|im_start|>%s<|im_end|>", strings.Repeat(string(rune('a'+r.IntN(26))), 1+r.IntN(2*pieceLen)))
					}
					c.Encode(b.String(), false)
				}
			})
			st := c.Stats()
			ratio := float64(st.L1Bytes) / float64(real)
			t.Logf("entries %d, accounted %d, heap %d, ratio %.2f", st.L1Entries, st.L1Bytes, real, ratio)
			if ratio < 0.95 || ratio > 2.5 {
				t.Errorf("accounted/heap = %.2f, want within [0.95, 2.5]", ratio)
			}
			runtime.KeepAlive(c)
		})
		t.Run(fmt.Sprintf("L0/text=%d", pieceLen), func(t *testing.T) {
			var c *Cache
			real := heapGrowth(func() {
				c = New(tok, nil, Config{L0Enabled: true, L0MaxEntries: 5000, L0Shards: 1})
				for i := range 5000 {
					c.Encode(fmt.Sprintf("%d%s", i, strings.Repeat("x", pieceLen)), false)
				}
			})
			st := c.Stats()
			ratio := float64(st.L0Bytes) / float64(real)
			t.Logf("entries %d, accounted %d, heap %d, ratio %.2f", st.L0Entries, st.L0Bytes, real, ratio)
			if ratio < 0.95 || ratio > 2.5 {
				t.Errorf("accounted/heap = %.2f, want within [0.95, 2.5]", ratio)
			}
			runtime.KeepAlive(c)
		})
	}
}

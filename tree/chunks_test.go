package tree

import (
	"fmt"
	"math"
	"testing"
)

// TestChunkSize: a chunk is the fewest whole pages that reach 256 tokens,
// and a page as large as an int can hold is a chunk of its own.
func TestChunkSize(t *testing.T) {
	for _, c := range []struct{ page, chunk int }{
		{1, 256},
		{16, 256},
		{100, 300},
		{256, 256},
		{512, 512},
		{math.MaxInt, math.MaxInt},
	} {
		if got := chunkFor(c.page); got != c.chunk {
			t.Errorf("chunkFor(%d) = %d, want %d", c.page, got, c.chunk)
		}
	}
	// A tree of such pages holds none of a prompt, and says so.
	tr := mustNew(t, Config{PageSize: math.MaxInt})
	tr.Insert(distinct(64), "a")
	if m := tr.Match(distinct(64)); m.Input != 0 || len(m.Tenants) != 0 {
		t.Errorf("Match = %+v, want nothing", m)
	}
}

// TestChunkKeysMatchAcrossChunks: a prompt that continues a node's tokens
// matches it through every whole chunk, and one that differs inside a chunk
// matches up to the page where it differs, not the chunk's start.
func TestChunkKeysMatchAcrossChunks(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 16})
	long := distinct(16 * 40) // 640 tokens: two whole chunks and a partial one
	tr.Insert(long, "a")
	for _, c := range []struct {
		name string
		at   int // first token that differs, -1 for none
		want int
	}{
		{"the same prompt", -1, 640},
		{"differs in the second chunk's third page", 256 + 2*16 + 5, 256 + 2*16},
		{"differs in the partial last chunk", 512 + 3*16, 512 + 3*16},
		{"differs in the first page after the first", 16 + 1, 16},
	} {
		p := append([]uint32(nil), long...)
		if c.at >= 0 {
			p[c.at]++
		}
		if got := tr.Match(p).Of("a"); got != c.want {
			t.Errorf("%s: matched %d tokens, want %d", c.name, got, c.want)
		}
	}
}

// distinct returns n tokens, all different.
func distinct(n int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = uint32(i + 1)
	}
	return ids
}

// BenchmarkChunkKeys times hashing a 64K-token prompt in chunks of each
// size, as a descent hashes a prompt: ns-per-token is what matching by
// keys costs per token of the prompt, and the sizes below 256 tokens show
// why a chunk is not a 16-token page (the per-call cost dominates).
//
//	go test -run '^$' -bench ChunkKeys ./tree/
func BenchmarkChunkKeys(b *testing.B) {
	prompt := distinct(1 << 16)
	for _, size := range []int{16, 64, 256, 512} {
		b.Run(fmt.Sprintf("tokens=%d", size), func(b *testing.B) {
			tr, err := New(Config{PageSize: size})
			if err != nil {
				b.Fatal(err)
			}
			var sink uint64
			for b.Loop() {
				for i := 0; i+size <= len(prompt); i += size {
					sink += tr.key(prompt[i : i+size])
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(prompt)), "ns-per-token")
			if sink == 1 {
				b.Log(sink)
			}
		})
	}
}

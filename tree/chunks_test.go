package tree

import (
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

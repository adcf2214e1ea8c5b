package tree

import (
	"math/rand/v2"
	"testing"
)

// TestBlockFilter holds the mirror's filter to its contract through
// random stores and removals: it never hides a known hash (a bucket of
// more than 255 hashes included), and it answers most unknown ones
// without the map, or it would save nothing.
func TestBlockFilter(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	blocks := newBlockTable()
	var f blockFilter
	var known []int64
	put := func(h int64) {
		if blocks.get(h) != 0 {
			return
		}
		blocks.put(h, 1)
		f.add(h, &blocks)
		known = append(known, h)
	}
	drop := func(i int) {
		h := known[i]
		known[i] = known[len(known)-1]
		known = known[:len(known)-1]
		blocks.del(h)
		f.remove(h)
	}
	check := func(step string) {
		t.Helper()
		for _, h := range known {
			if !f.mayHold(h) {
				t.Fatalf("%s: known hash %d filtered out", step, h)
			}
		}
	}
	for i := range 20_000 {
		if len(known) > 0 && r.IntN(3) == 0 {
			drop(r.IntN(len(known)))
		} else {
			put(r.Int64())
		}
		if i%1000 == 0 {
			check("random")
		}
	}
	check("random")
	// 300 hashes in one bucket saturate it; removing them all leaves it
	// saturated, never below what it holds.
	b := f.bucket(known[0])
	var same []int64
	for h := int64(1); len(same) < 300; h++ {
		if blocks.get(h) == 0 && f.bucket(h) == b {
			same = append(same, h)
		}
	}
	for _, h := range same {
		put(h)
	}
	check("saturated")
	for i := len(known) - 1; i >= 0; i-- {
		if f.bucket(known[i]) == b {
			drop(i)
			check("emptying the saturated bucket")
		}
	}
	check("after the saturated bucket emptied")
	misses := 0
	for range 10_000 {
		if h := r.Int64(); f.mayHold(h) {
			if blocks.get(h) == 0 {
				misses++
			}
		}
	}
	if misses > 3_000 {
		t.Fatalf("%d of 10,000 unknown hashes passed the filter with %d known in %d buckets", misses, len(known), len(f.counts))
	}
}

// TestMirrorPagesAcrossChunks stores chains of pages as large as a chunk
// and as small as a token, so that blocks land in several chunks of
// tokens, and reads each page back through the paths Store returns.
func TestMirrorPagesAcrossChunks(t *testing.T) {
	for _, ps := range []int{1, 512, mirrorChunkTokens, 2 * mirrorChunkTokens} {
		m := NewMirror(ps, 1<<20)
		n := 3<<m.chunkShift + 1 // blocks, into a fourth chunk
		blocks := make([]MirrorBlock, n)
		want := make([]uint32, 0, n*ps)
		for i := range blocks {
			page := make([]uint32, ps)
			for j := range page {
				page[j] = uint32(i*ps + j)
			}
			blocks[i] = MirrorBlock{Hash: int64(i + 1), Tokens: page}
			want = append(want, page...)
		}
		a, _, err := m.Store(0, false, blocks)
		if err != nil || len(a) != 1 || a[0].Pages != n {
			t.Fatalf("page size %d: %d blocks stored: %v, %v", ps, n, len(a), err)
		}
		if !equal(a[0].Path, want) {
			t.Fatalf("page size %d: the path of %d blocks differs from their pages", ps, n)
		}
		// The first block leaves, and the rest with it as one run.
		d := m.Remove([]int64{1})
		if len(d) != 2 || d[0].Pages != 1 || d[1].Pages != n-1 || !equal(d[1].Path, want) {
			t.Fatalf("page size %d: removing the first block detached %d runs, or another path", ps, len(d))
		}
	}
}

package tree

import "testing"

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

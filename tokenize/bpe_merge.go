package tokenize

import "math"

// Merging applies the merge rules to a word's symbols until none applies. The rule, as in
// Hugging Face tokenizers: repeatedly merge the adjacent pair with the lowest rank; among
// pairs of equal rank, the leftmost. Short words use a direct scan (O(n²) on tiny n is
// faster than a heap); long words — SentencePiece-style vocabularies without a
// pre-tokenizer hand the whole text over as one word — use a priority queue over a linked
// list of symbols, O(n log n).

// smallWord is the largest symbol count merged by direct scan.
const smallWord = 48

const noRank = math.MaxUint32

type mergeScratch struct {
	syms  []uint32
	ranks []uint32
	news  []uint32
	prev  []int32
	next  []int32
	dead  []bool
	heap  mergeHeap
}

func (m *bpeModel) mergeAll(sc *mergeScratch, syms []uint32) []uint32 {
	switch {
	case len(syms) < 2:
		return syms
	case len(syms) <= smallWord:
		return m.mergeScan(sc, syms)
	default:
		return m.mergeHeap(sc, syms)
	}
}

func (m *bpeModel) pairRank(a, b uint32) (uint32, uint32) {
	if mi, ok := m.merges[pairKey(a, b)]; ok {
		return mi.rank, mi.newID
	}
	return noRank, 0
}

func (m *bpeModel) mergeScan(sc *mergeScratch, syms []uint32) []uint32 {
	n := len(syms)
	ranks := grow(sc.ranks, n-1)
	news := grow(sc.news, n-1)
	for i := 0; i < n-1; i++ {
		ranks[i], news[i] = m.pairRank(syms[i], syms[i+1])
	}
	for {
		best := -1
		bestRank := uint32(noRank)
		for i := 0; i < n-1; i++ {
			if ranks[i] < bestRank {
				best, bestRank = i, ranks[i]
			}
		}
		if best < 0 {
			break
		}
		syms[best] = news[best]
		copy(syms[best+1:], syms[best+2:n])
		copy(ranks[best:], ranks[best+1:n-1])
		copy(news[best:], news[best+1:n-1])
		n--
		syms = syms[:n]
		if best > 0 {
			ranks[best-1], news[best-1] = m.pairRank(syms[best-1], syms[best])
		}
		if best < n-1 {
			ranks[best], news[best] = m.pairRank(syms[best], syms[best+1])
		}
	}
	sc.ranks, sc.news = ranks, news
	return syms
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n*2)
	}
	return s[:n]
}

// mergeEntry is a candidate merge of the symbol at pos with its right neighbour.
type mergeEntry struct {
	rank  uint32
	pos   int32
	newID uint32
}

func (a mergeEntry) less(b mergeEntry) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.pos < b.pos
}

// mergeHeap is a binary min-heap on (rank, pos).
type mergeHeap []mergeEntry

func (h *mergeHeap) push(e mergeEntry) {
	*h = append(*h, e)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *mergeHeap) pop() mergeEntry {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(s) {
			break
		}
		c := l
		if r := l + 1; r < len(s) && s[r].less(s[l]) {
			c = r
		}
		if !s[c].less(s[i]) {
			break
		}
		s[i], s[c] = s[c], s[i]
		i = c
	}
	*h = s
	return top
}

func (m *bpeModel) mergeHeap(sc *mergeScratch, syms []uint32) []uint32 {
	n := len(syms)
	prev := grow(sc.prev, n)
	next := grow(sc.next, n)
	dead := grow(sc.dead, n)
	h := sc.heap[:0]
	for i := 0; i < n; i++ {
		prev[i], next[i], dead[i] = int32(i-1), int32(i+1), false
	}
	next[n-1] = -1
	for i := 0; i < n-1; i++ {
		if r, id := m.pairRank(syms[i], syms[i+1]); r != noRank {
			h = append(h, mergeEntry{rank: r, pos: int32(i), newID: id})
		}
	}
	// Heapify.
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
	for len(h) > 0 {
		top := h.pop()
		pos := top.pos
		if dead[pos] || next[pos] < 0 {
			continue
		}
		right := next[pos]
		// Skip expired entries: the pair at pos no longer yields this token.
		if mi, ok := m.merges[pairKey(syms[pos], syms[right])]; !ok || mi.newID != top.newID {
			continue
		}
		syms[pos] = top.newID
		dead[right] = true
		next[pos] = next[right]
		if nr := next[right]; nr >= 0 {
			prev[nr] = pos
		}
		if p := prev[pos]; p >= 0 {
			if r, id := m.pairRank(syms[p], syms[pos]); r != noRank {
				h.push(mergeEntry{rank: r, pos: p, newID: id})
			}
		}
		if nx := next[pos]; nx >= 0 {
			if r, id := m.pairRank(syms[pos], syms[nx]); r != noRank {
				h.push(mergeEntry{rank: r, pos: pos, newID: id})
			}
		}
	}
	out := syms[:0]
	for i := 0; i < n; i++ {
		if !dead[i] {
			out = append(out, syms[i])
		}
	}
	sc.prev, sc.next, sc.dead, sc.heap = prev, next, dead, h[:0]
	return out
}

func siftDown(s mergeHeap, i int) {
	for {
		l := 2*i + 1
		if l >= len(s) {
			return
		}
		c := l
		if r := l + 1; r < len(s) && s[r].less(s[l]) {
			c = r
		}
		if !s[c].less(s[i]) {
			return
		}
		s[i], s[c] = s[c], s[i]
		i = c
	}
}

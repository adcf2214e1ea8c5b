package tokenize

import "slices"

// pieceTrie is a byte trie over a vocabulary, laid out for the Viterbi search, which
// walks it from every rune boundary of every word: the root's children sit in a dense
// 256-entry table (every walk starts there), and each other node's children are a
// sorted run of labels in one shared array, scanned linearly when short and searched
// when long. Built once by pieceTrieBuilder, read-only afterwards.
type pieceTrie struct {
	root   [256]int32 // child of the root per byte, -1 if none
	first  []uint32   // node → start of its children in labels/next; first[n+1] ends them
	labels []byte
	next   []uint32
	value  []int32 // node → piece id, -1 when no piece ends there
}

// walk calls visit for every piece that is a prefix of s, shortest first.
func (t *pieceTrie) walk(s string, visit func(length int, id uint32)) {
	if len(s) == 0 || t.root[s[0]] < 0 {
		return
	}
	node := uint32(t.root[s[0]])
	for i := 0; ; {
		if v := t.value[node]; v >= 0 {
			visit(i+1, uint32(v))
		}
		i++
		if i == len(s) {
			return
		}
		child, ok := t.child(node, s[i])
		if !ok {
			return
		}
		node = child
	}
}

func (t *pieceTrie) child(node uint32, c byte) (uint32, bool) {
	lo, hi := t.first[node], t.first[node+1]
	labels := t.labels[lo:hi]
	if len(labels) <= 8 {
		for j, l := range labels {
			if l == c {
				return t.next[lo+uint32(j)], true
			}
		}
		return 0, false
	}
	if j, ok := slices.BinarySearch(labels, c); ok {
		return t.next[lo+uint32(j)], true
	}
	return 0, false
}

// pieceTrieBuilder collects pieces in a map-based trie, then freezes it.
type pieceTrieBuilder struct {
	edges map[uint64]uint32 // node<<8 | byte → child node
	value []int32
}

func (b *pieceTrieBuilder) insert(piece string, id uint32) {
	if b.edges == nil {
		b.edges = make(map[uint64]uint32)
		b.value = []int32{-1}
	}
	node := uint32(0)
	for i := 0; i < len(piece); i++ {
		k := uint64(node)<<8 | uint64(piece[i])
		child, ok := b.edges[k]
		if !ok {
			child = uint32(len(b.value))
			b.edges[k] = child
			b.value = append(b.value, -1)
		}
		node = child
	}
	b.value[node] = int32(id) // a later duplicate wins, as in the string → id map
}

func (b *pieceTrieBuilder) freeze() pieceTrie {
	if b.value == nil {
		b.value = []int32{-1}
	}
	n := len(b.value)
	t := pieceTrie{value: b.value, first: make([]uint32, n+1)}
	for i := range t.root {
		t.root[i] = -1
	}
	// Count children per node, then place them; sort each node's run by label.
	for k := range b.edges {
		t.first[k>>8+1]++
	}
	for i := 1; i <= n; i++ {
		t.first[i] += t.first[i-1]
	}
	t.labels = make([]byte, len(b.edges))
	t.next = make([]uint32, len(b.edges))
	fill := slices.Clone(t.first[:n])
	for k, child := range b.edges {
		node := k >> 8
		t.labels[fill[node]] = byte(k)
		t.next[fill[node]] = child
		fill[node]++
		if node == 0 {
			t.root[byte(k)] = int32(child)
		}
	}
	for node := 0; node < n; node++ {
		lo, hi := t.first[node], t.first[node+1]
		if hi-lo > 1 {
			sortRun(t.labels[lo:hi], t.next[lo:hi])
		}
	}
	return t
}

// sortRun sorts labels ascending, moving next along (insertion sort: runs are short,
// except the root's, which walk reads through the dense table instead).
func sortRun(labels []byte, next []uint32) {
	for i := 1; i < len(labels); i++ {
		for j := i; j > 0 && labels[j] < labels[j-1]; j-- {
			labels[j], labels[j-1] = labels[j-1], labels[j]
			next[j], next[j-1] = next[j-1], next[j]
		}
	}
}

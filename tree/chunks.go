package tree

import "unsafe"

// Chunk keys: how a descent matches a long node without reading its tokens.
//
// A lookup of a long prompt used to compare every matched token with the
// node's copy of it. The prompt has just been decoded and sits in the CPU's
// caches; the node's copy, after thousands of other requests, does not, so
// matching an 85K-token conversation read 340 KB from memory: about 40 µs
// on the machine of BENCHMARKS.md, most of the mirror's lookup p99.
//
// Each node therefore keeps a key (Tree.key, the keyed hash that names
// children) for every whole chunk of its tokens, counted from the node's
// start, and a descent hashes the prompt's matching chunks (warm) and
// compares keys. Tokens are read only where keys cannot answer: the chunk
// where the keys first differ, to find the page where the match ends, and
// the node's last partial chunk. A chunk is the smallest whole number of
// pages of at least chunkMin tokens: hashing costs about as much per call
// as for 256 bytes, so one-token pages (SGLang's default) hashed a page at
// a time would cost more than the comparison they replace (0.44 ns a token
// in 16-token chunks, 0.09 in 256-token ones: BenchmarkChunkKeys).
//
// What this gives up: two different chunks whose keys are equal would be
// taken as equal. The hash is keyed with a random value drawn per tree,
// so a client cannot choose tokens that collide, and two unrelated chunks
// collide with probability 2^-64 per comparison. A collision would cost
// one misrouted request (the router predicts a hit the engine does not
// have); the engine matches its own cache and computes the right tokens
// regardless. Children are chosen by the key of their first page too; child
// also compares that page's first pageCheck tokens (the whole page at
// kvgate's default size), so a collision sends a descent down the wrong
// branch only between pages that agree on those.

// chunkMin is the fewest tokens in a chunk.
const chunkMin = 256

// chunkFor returns the chunk size for pages of pageSize tokens (≥ 1).
func chunkFor(pageSize int) int {
	if pageSize >= chunkMin {
		return pageSize // and no sum that could overflow
	}
	return (chunkMin + pageSize - 1) / pageSize * pageSize
}

// chunkKeys returns the keys of tokens' whole chunks, in the form a node
// keeps them (see node.keys): nil if there are none.
func (t *Tree) chunkKeys(tokens []uint32) *uint64 {
	head, keys := newKeys(len(tokens) / t.chunk)
	for i := range keys {
		keys[i] = t.key(tokens[i*t.chunk : (i+1)*t.chunk])
	}
	return head
}

// newKeys allocates room for n keys in the form a node keeps them: head
// points to the count, keys are the n words after it. Both are nil for 0.
func newKeys(n int) (head *uint64, keys []uint64) {
	if n == 0 {
		return nil, nil
	}
	words := make([]uint64, 1+n)
	words[0] = uint64(n)
	return &words[0], words[1:]
}

// chunks returns the keys n keeps.
func (n *node) chunks() []uint64 {
	if n.keys == nil {
		return nil
	}
	return unsafe.Slice(n.keys, 1+*n.keys)[1:]
}

// common returns how many whole pages of rest match the start of c's
// tokens, in tokens. The caller has compared the first page (child).
func (t *Tree) common(c *node, rest []uint32) int {
	m := min(len(c.tokens), len(rest))
	ch, ps := t.chunk, t.pageSize
	keys, i := c.chunks(), 0
	if ch == ps {
		i = ps // the first chunk is the first page
	}
	for ; i+ch <= m; i += ch {
		if keys[i/ch] != t.key(rest[i:i+ch]) {
			return i + commonPrefix(c.tokens[i:i+ch], rest[i:i+ch], ps)
		}
	}
	if i == 0 {
		i = ps // no whole chunk: the first page is known to match
	}
	return i + commonPrefix(c.tokens[i:m], rest[i:m], ps)
}

// splitKeys gives u, the upper half of a split after k tokens, and n, the
// lower half whose tokens now start at the split, their keys. The upper
// half takes n's array and keeps its whole chunks before k; the lower half's
// chunks are counted from its new start, so unless k falls on a chunk
// boundary they are hashed again (the split already copies the shorter half
// of the tokens).
func (t *Tree) splitKeys(u, n *node, k int) {
	old, keys, upper := n.keys, n.chunks(), k/t.chunk
	if k%t.chunk == 0 {
		var lower []uint64
		n.keys, lower = newKeys(len(keys) - upper)
		copy(lower, keys[upper:])
	} else {
		n.keys = t.chunkKeys(n.tokens)
	}
	if upper > 0 {
		*old = uint64(upper)
		u.keys = old
	}
}

package sim

import (
	"container/heap"
	"math/bits"
	"slices"
)

// pageCache is the simulated engine's paged prefix cache: a radix tree whose
// edges are whole pages of tokens, shared by every request, like SGLang's
// RadixCache with page_size > 1 or vLLM's hashed block pool. A page is
// identified by its own tokens and by its parent, so a page stands for the
// whole token prefix that ends with it.
//
// Only whole pages are cached; a prompt's trailing partial page never is. Pages
// held by running requests are pinned and never evicted. Unpinned pages are
// evicted least recently used, and only when they are leaves, so what stays
// cached is always a prefix. Capacity counts pages in the tree (pinned or not).
//
// Recency: every operation that walks a path gives each page it touches a new,
// strictly increasing stamp, from the root down. Stamps are unique, so the
// eviction order is fully determined and tests can predict it.
//
// Page hashes (the block hashes of KV events) are chained from a seed the
// engine draws at random when it starts, so the same content has different
// names in different engines and in one engine before and after a restart,
// as with vLLM's per-process hash seed. A router can use them to link events
// together, never to compute a block's name itself.
//
// pageCache is not safe for concurrent use; the engine guards it with its lock.
type pageCache struct {
	pageSize int
	capacity int // pages

	root   *page // its hash starts the chain of page hashes
	size   int   // pages in the tree, root excluded
	pinned int   // pages with pins > 0
	clock  uint64
	leaves leafHeap // evictable leaves, lazily invalidated

	// changes records what entered and left the cache since the last
	// drainChanges, in order, for the KV event stream.
	changes []cacheChange
}

// page is one node of the tree: pageSize tokens hanging off its parent.
type page struct {
	parent   *page
	key      pageID // the key in parent.children
	tokens   []uint32
	hash     int64 // chained: depends on the parent's hash and tokens
	children map[pageID]*page
	pins     int
	stamp    uint64
	inTree   bool
}

// lease is the path of pages a running request pins; release unpins them.
type lease struct {
	pages []*page
}

// cacheChange is one entry of the change log: one page stored, pages
// removed, or a flush. Storing is logged page by page, so the log replayed
// in order rebuilds the tree exactly: each stored page's parent is either
// the root or a page logged (and not removed) before it.
type cacheChange struct {
	stored  *page
	removed []int64
	cleared bool
}

// newPageCache returns an empty cache whose page hashes are chained from
// hashSeed (see pageCache).
func newPageCache(pageSize, capacityPages int, hashSeed int64) *pageCache {
	return &pageCache{
		pageSize: pageSize,
		capacity: capacityPages,
		root:     &page{children: map[pageID]*page{}, inTree: true, hash: hashSeed},
	}
}

// pageID names a page among its siblings: a 128-bit hash of its tokens.
// It replaced the tokens encoded as a string, which allocated a string per
// page of every prompt looked up; when the engine shares a process with a
// router (tests, benchmarks), that garbage landed on the router's p99. A
// lookup still compares the tokens, so a collision makes a page look
// uncached, never makes the wrong page match.
type pageID struct{ a, b uint64 }

// pageIDOf hashes tokens twice, with FNV-1a over whole tokens and with a
// multiply-rotate mix, so that the two halves are independent.
func pageIDOf(tokens []uint32) pageID {
	a, b := uint64(fnvOffset64), uint64(golden)
	for _, t := range tokens {
		a = (a ^ uint64(t)) * fnvPrime64
		b = bits.RotateLeft64((b^uint64(t))*0xff51afd7ed558ccd, 29) * 0xc4ceb9fe1a85ec53
	}
	return pageID{a, b ^ uint64(len(tokens))}
}

// The 64-bit FNV-1a constants.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// blockHash chains a page's hash to its parent's, so equal hashes mean equal
// prefixes (up to collisions), the way vLLM and SGLang name KV blocks. A
// page off the root chains from the root's hash, the cache's seed. It is
// FNV-1a over the parent's hash and the tokens, little-endian, written out
// so that hashing a page allocates nothing and makes no call per token.
func blockHash(parent int64, tokens []uint32) int64 {
	h := uint64(fnvOffset64)
	for i := range 8 {
		h = (h ^ uint64(byte(uint64(parent)>>(8*i)))) * fnvPrime64
	}
	for _, t := range tokens {
		for i := range 4 {
			h = (h ^ uint64(byte(t>>(8*i)))) * fnvPrime64
		}
	}
	return int64(h)
}

// matchPath returns the cached pages along tokens' whole-page prefix, without
// touching them.
func (c *pageCache) matchPath(tokens []uint32) []*page {
	var path []*page
	node := c.root
	for i := 0; i+c.pageSize <= len(tokens); i += c.pageSize {
		pt := tokens[i : i+c.pageSize]
		child, ok := node.children[pageIDOf(pt)]
		if !ok || !slices.Equal(child.tokens, pt) {
			break
		}
		path = append(path, child)
		node = child
	}
	return path
}

// match returns how many leading tokens are cached (a multiple of pageSize).
func (c *pageCache) match(tokens []uint32) int {
	return len(c.matchPath(tokens)) * c.pageSize
}

// reused is what a request for prompt reuses of cached, the prompt's tokens
// found cached (whole pages): all but the page that holds the prompt's last
// token, which the engine computes again to sample the first output token
// from, even when the whole prompt is cached. vLLM caps a hit at the
// prompt's length less one token (vllm/v1/core/kv_cache_manager.py,
// get_computed_blocks) and SGLang its match likewise
// (Req._compute_max_prefix_len), so a prompt that ends on a page boundary
// has its last page computed again and reported uncached.
func (c *pageCache) reused(prompt []uint32, cached int) int {
	return min(cached, max(len(prompt)-1, 0)/c.pageSize*c.pageSize)
}

// acquire pins tokens' whole pages, inserting the missing ones and evicting
// unpinned leaves to make room. It is all or nothing: if the pages cannot all
// fit even after evicting everything evictable, nothing changes and ok is
// false. cached is the number of tokens that were already in the cache.
func (c *pageCache) acquire(tokens []uint32) (l *lease, cached int, ok bool) {
	path := c.matchPath(tokens)
	missing := len(tokens)/c.pageSize - len(path)
	// Pages on path become pinned, so they are not evictable for this request.
	evictable := c.size - c.pinned
	for _, p := range path {
		if p.pins == 0 {
			evictable--
		}
	}
	if c.capacity-c.size+evictable < missing {
		return nil, 0, false
	}
	l = c.extend(tokens, path)
	return l, len(path) * c.pageSize, true
}

// insert caches as many of tokens' whole pages as fit, evicting LRU leaves
// for them, and leaves them unpinned. It reports how many tokens are cached
// along tokens afterwards.
func (c *pageCache) insert(tokens []uint32) int {
	l := c.extend(tokens, c.matchPath(tokens))
	n := len(l.pages) * c.pageSize
	c.release(l)
	return n
}

// extend touches and pins path (the cached prefix of tokens), then adds the
// remaining whole pages of tokens, pinned, while room can be made. It returns
// the pinned path.
func (c *pageCache) extend(tokens []uint32, path []*page) *lease {
	for _, p := range path {
		c.pin(p)
		c.clock++
		p.stamp = c.clock
	}
	node := c.root
	if len(path) > 0 {
		node = path[len(path)-1]
	}
	for i := len(path) * c.pageSize; i+c.pageSize <= len(tokens); i += c.pageSize {
		if c.size >= c.capacity && !c.evictOne() {
			break
		}
		id := pageIDOf(tokens[i : i+c.pageSize])
		if _, taken := node.children[id]; taken {
			break // another page's tokens hash alike (see pageID): stop here, a prefix is cached
		}
		pt := append([]uint32(nil), tokens[i:i+c.pageSize]...)
		p := &page{
			parent:   node,
			key:      id,
			tokens:   pt,
			hash:     blockHash(node.hash, pt),
			children: map[pageID]*page{},
			inTree:   true,
		}
		node.children[p.key] = p
		c.size++
		c.pin(p)
		c.clock++
		p.stamp = c.clock
		path = append(path, p)
		c.changes = append(c.changes, cacheChange{stored: p})
		node = p
	}
	return &lease{pages: path}
}

func (c *pageCache) pin(p *page) {
	if p.pins == 0 {
		c.pinned++
	}
	p.pins++
}

// release unpins a lease's pages; they stay cached until evicted.
func (c *pageCache) release(l *lease) {
	if l == nil {
		return
	}
	for _, p := range l.pages {
		p.pins--
		if p.pins == 0 {
			c.pinned--
			if len(p.children) == 0 {
				c.pushLeaf(p)
			}
		}
	}
	l.pages = nil
}

// evictOne removes the least recently used unpinned leaf. It reports false
// when nothing can be evicted.
func (c *pageCache) evictOne() bool {
	for c.leaves.Len() > 0 {
		e := heap.Pop(&c.leaves).(leafEntry)
		p := e.page
		if !p.inTree || p.pins > 0 || len(p.children) > 0 || p.stamp != e.stamp {
			continue // stale entry
		}
		c.remove(p)
		c.logRemoved(p.hash)
		if parent := p.parent; parent != c.root && parent.pins == 0 && len(parent.children) == 0 {
			c.pushLeaf(parent)
		}
		return true
	}
	return false
}

func (c *pageCache) remove(p *page) {
	delete(p.parent.children, p.key)
	p.inTree = false
	c.size--
}

func (c *pageCache) logRemoved(hash int64) {
	if n := len(c.changes); n > 0 && c.changes[n-1].removed != nil {
		c.changes[n-1].removed = append(c.changes[n-1].removed, hash)
		return
	}
	c.changes = append(c.changes, cacheChange{removed: []int64{hash}})
}

func (c *pageCache) pushLeaf(p *page) {
	heap.Push(&c.leaves, leafEntry{stamp: p.stamp, page: p})
	// Stale entries pile up as pages are touched; rebuild when they dominate.
	if c.leaves.Len() > 2*c.size+64 {
		c.rebuildLeaves()
	}
}

func (c *pageCache) rebuildLeaves() {
	c.leaves = c.leaves[:0]
	c.walk(func(p *page) {
		if p.pins == 0 && len(p.children) == 0 {
			c.leaves = append(c.leaves, leafEntry{stamp: p.stamp, page: p})
		}
	})
	heap.Init(&c.leaves)
}

// walk visits every cached page, parents before children.
func (c *pageCache) walk(fn func(*page)) {
	var visit func(*page)
	visit = func(n *page) {
		for _, ch := range n.children {
			fn(ch)
			visit(ch)
		}
	}
	visit(c.root)
}

// flush drops every unpinned page. With nothing pinned that is a full clear,
// logged as such; otherwise the dropped pages are logged as removed.
func (c *pageCache) flush() {
	if c.pinned == 0 {
		c.root.children = map[pageID]*page{}
		c.size = 0
		c.leaves = c.leaves[:0]
		c.changes = append(c.changes, cacheChange{cleared: true})
		return
	}
	for c.evictOne() {
	}
}

// parentHash is the hash of the page p hangs off; ok is false when that is
// the root (KV events leave parent_block_hash out then).
func (c *pageCache) parentHash(p *page) (hash int64, ok bool) {
	if p.parent == c.root {
		return 0, false
	}
	return p.parent.hash, true
}

// paths returns every cached page as its full token path from the root (its
// ancestors' tokens, then its own), sorted lexicographically, so that a
// prefix comes before the paths that extend it.
func (c *pageCache) paths() [][]uint32 {
	out := make([][]uint32, 0, c.size)
	var visit func(n *page, prefix []uint32)
	visit = func(n *page, prefix []uint32) {
		for _, ch := range n.children {
			path := append(slices.Clip(prefix), ch.tokens...)
			out = append(out, path)
			visit(ch, path)
		}
	}
	visit(c.root, nil)
	slices.SortFunc(out, slices.Compare)
	return out
}

// drainChanges returns and forgets the change log.
func (c *pageCache) drainChanges() []cacheChange {
	ch := c.changes
	c.changes = nil
	return ch
}

// usedPages is the number of pages in the tree; pinnedPages of those in use.
func (c *pageCache) usedPages() int   { return c.size }
func (c *pageCache) pinnedPages() int { return c.pinned }

type leafEntry struct {
	stamp uint64
	page  *page
}

// leafHeap is a min-heap of candidate leaves by stamp.
type leafHeap []leafEntry

func (h leafHeap) Len() int           { return len(h) }
func (h leafHeap) Less(i, j int) bool { return h[i].stamp < h[j].stamp }
func (h leafHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *leafHeap) Push(x any)        { *h = append(*h, x.(leafEntry)) }
func (h *leafHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

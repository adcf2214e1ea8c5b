package tree

// The frontier index lets an insert that crosses the budget, or a tenant's
// limit, evict at the cost of what it evicts: it pops the next (node,
// tenant) pair in eviction order instead of walking the tree for the
// frontier. It is a min-heap per tenant of frontier entries, each the pair
// with the eviction key it had when pushed, and a small heap of the tenants
// ordered by their heaps' first entries, for the budget's global order.
//
// Entries are invalidated lazily. The index keeps one invariant: every
// frontier pair of a live tenant has an entry whose key comes no later in
// the eviction order than the pair's current key. Popping the first entry
// then finds the first frontier pair: an entry whose pair is gone or off
// the frontier is dropped, one whose key has moved on is pushed again with
// its current key, and one with its pair's key is the first pair, since any
// pair before it would have had an entry before it. What changes the
// frontier or moves a frontier pair's key:
//
//   - an insert touches every node on its path (and their ancestors), but
//     each of those has the tenant's next path node below it, so only the
//     node where the insert ends can be on the tenant's frontier. A touch
//     only moves a key later (a later tick, one more use, a higher priority,
//     speculative to confirmed; FIFO and FILO keep the creation time),
//     except under MRU, where a later access comes earlier: so insertBelow
//     pushes the end node when the tenant's holding there is new, and under
//     MRU whenever it is on the frontier. A known prompt's insert, routing's
//     common case, pushes nothing;
//   - a split copies a node's holders to a new upper half that has the lower
//     half, which keeps the node's identity and its entries, below it: no
//     frontier pair changes;
//   - removing a pair (eviction, Trim, ExpireSpeculative, a tenant's sweep)
//     may put its parent on the frontier with the key it has: removeHolder
//     pushes it then.
//
// Stale entries (pair gone, or off the frontier) are dropped when popped,
// and by probes: every push, and every removal of a pair other than by
// popping its entry, checks two entries of the tenant's heap at random
// positions and drops them if stale. A stale entry comes with a push or a
// removal (a pair leaves the frontier when an insert adds a new holding
// below it), so in expectation at most about half a heap is stale. An entry
// that escapes the probes while its pair is off the frontier counts again
// when the pair rejoins it, beside the one pushed then; it goes stale again
// when the pair next leaves, so such duplicates do not pile up
// (TestFrontierIndexChurn). A heap that still grows past twice its tenant's
// holder entries (plus a margin) is compacted whole, which bounds the
// index's memory at that in all cases.

// fentry is a frontier index entry: a node and the key its tenant's holding
// had when the entry was pushed. The tenant is the heap's.
type fentry struct {
	n    *node
	tick uint64
	aux  int32
	conf bool
}

// frontierIndex is the index's state. It lives under the tree's write lock.
type frontierIndex struct {
	order order
	heaps [][]fentry // by tenant id
	tops  []uint32   // tenant ids with a non-empty heap, a min-heap by heaps[id][0]
	at    []int32    // by tenant id: position in tops, -1 for none
	rng   uint64     // xorshift state for the probes
	// compactions counts whole-heap compactions: the probes should make
	// them rare (TestFrontierIndexChurn).
	compactions int
}

func newFrontierIndex(o order) *frontierIndex {
	return &frontierIndex{order: o, rng: 0x9e3779b97f4a7c15}
}

// less is the eviction order (see keyLess).
func (x *frontierIndex) less(a, b *fentry) bool {
	return keyLess(x.order, a.conf, a.aux, a.tick, b.conf, b.aux, b.tick)
}

func (x *frontierIndex) rand() uint64 {
	x.rng ^= x.rng << 13
	x.rng ^= x.rng >> 7
	x.rng ^= x.rng << 17
	return x.rng
}

func (x *frontierIndex) grow(id uint32) {
	for int(id) >= len(x.heaps) {
		x.heaps = append(x.heaps, nil)
		x.at = append(x.at, -1)
	}
}

// len returns the entries held, stale ones included.
func (x *frontierIndex) len() (n int) {
	for _, h := range x.heaps {
		n += len(h)
	}
	return n
}

func (x *frontierIndex) push(id uint32, e fentry) {
	x.grow(id)
	h := append(x.heaps[id], e)
	x.heaps[id] = h
	x.up(h, len(h)-1)
	x.fixTop(id)
}

// removeAt drops entry i of tenant id's heap.
func (x *frontierIndex) removeAt(id uint32, i int) {
	h := x.heaps[id]
	last := len(h) - 1
	h[i] = h[last]
	h[last] = fentry{} // the heap keeps no node alive
	h = h[:last]
	x.heaps[id] = h
	if i < last {
		x.down(h, i)
		x.up(h, i)
	}
	x.fixTop(id)
}

// pop removes and returns tenant id's first entry.
func (x *frontierIndex) pop(id uint32) (fentry, bool) {
	if int(id) >= len(x.heaps) || len(x.heaps[id]) == 0 {
		return fentry{}, false
	}
	e := x.heaps[id][0]
	x.removeAt(id, 0)
	return e, true
}

// popMin removes and returns the first entry of all, and its tenant.
func (x *frontierIndex) popMin() (uint32, fentry, bool) {
	if len(x.tops) == 0 {
		return 0, fentry{}, false
	}
	id := x.tops[0]
	e, _ := x.pop(id)
	return id, e, true
}

// reset drops tenant id's heap: it holds nothing any more.
func (x *frontierIndex) reset(id uint32) {
	if int(id) < len(x.heaps) {
		x.heaps[id] = nil
		x.fixTop(id)
	}
}

func (x *frontierIndex) up(h []fentry, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !x.less(&h[i], &h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (x *frontierIndex) down(h []fentry, i int) {
	n := len(h)
	for {
		l, m := 2*i+1, i
		if l < n && x.less(&h[l], &h[m]) {
			m = l
		}
		if r := l + 1; r < n && x.less(&h[r], &h[m]) {
			m = r
		}
		if m == i {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// fixTop puts tenant id where it belongs in tops after its heap's first
// entry changed (or its heap emptied or filled).
func (x *frontierIndex) fixTop(id uint32) {
	p := int(x.at[id])
	if len(x.heaps[id]) == 0 {
		if p < 0 {
			return
		}
		last := len(x.tops) - 1
		x.swapTops(p, last)
		x.tops = x.tops[:last]
		x.at[id] = -1
		if p < last {
			x.topDown(p)
			x.topUp(p)
		}
		return
	}
	if p < 0 {
		x.tops = append(x.tops, id)
		p = len(x.tops) - 1
		x.at[id] = int32(p)
	}
	x.topDown(p)
	x.topUp(p)
}

func (x *frontierIndex) topLess(i, j int) bool {
	return x.less(&x.heaps[x.tops[i]][0], &x.heaps[x.tops[j]][0])
}

func (x *frontierIndex) swapTops(i, j int) {
	x.tops[i], x.tops[j] = x.tops[j], x.tops[i]
	x.at[x.tops[i]], x.at[x.tops[j]] = int32(i), int32(j)
}

func (x *frontierIndex) topUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !x.topLess(i, p) {
			return
		}
		x.swapTops(i, p)
		i = p
	}
}

func (x *frontierIndex) topDown(i int) {
	n := len(x.tops)
	for {
		l, m := 2*i+1, i
		if l < n && x.topLess(l, m) {
			m = l
		}
		if r := l + 1; r < n && x.topLess(r, m) {
			m = r
		}
		if m == i {
			return
		}
		x.swapTops(i, m)
		i = m
	}
}

// index returns the frontier index, building it from a walk of the tree
// if the tree has none yet: a tree made without a budget that then gets a
// tenant limit. A tree made with one (kvgate's always is) has had it from
// the start. The caller holds the write lock.
func (t *Tree) index() *frontierIndex {
	if t.idx == nil {
		t.idx = newFrontierIndex(t.order)
		for _, c := range t.frontier(nil) {
			t.idx.push(c.tenant, fentry{c.n, c.tick, c.aux, c.confirmed})
		}
	}
	return t.idx
}

// live returns the holding e (of tenant id's heap) stands for, if it is
// still on the tenant's frontier; false if e is stale.
func (t *Tree) live(id uint32, e *fentry) (holder, bool) {
	if !t.tenants[id].live || e.n.deleted() {
		return holder{}, false
	}
	i := e.n.holderIndex(id)
	if i < 0 || !e.n.leafFor(id) {
		return holder{}, false
	}
	return e.n.holders[i], true
}

// sameKey reports whether e has h's key, as far as the order goes.
func (x *frontierIndex) sameKey(e *fentry, h holder) bool {
	return !keyLess(x.order, e.conf, e.aux, e.tick, h.confirmed(), h.aux, h.tick) &&
		!keyLess(x.order, h.confirmed(), h.aux, h.tick, e.conf, e.aux, e.tick)
}

// noteFrontier pushes tenant id's holding of n, if n is on its frontier,
// and probes the tenant's heap if probe is set. Without a probe the heap's
// bound is still held: an eviction pops an entry and pushes the parent's
// for each holding it drops, so the heap keeps its length while the
// tenant's holder entries fall. The caller holds the write lock and
// checked that the tree has an index.
func (t *Tree) noteFrontier(n *node, id uint32, probe bool) {
	if n != &t.root && !n.deleted() {
		if i := n.holderIndex(id); i >= 0 && n.leafFor(id) {
			h := n.holders[i]
			t.idx.push(id, fentry{n, h.tick, h.aux, h.confirmed()})
		}
	}
	if probe {
		t.probe(id)
	} else {
		t.bound(id)
	}
}

// probe checks two random entries of tenant id's heap and drops the stale
// ones, and compacts the heap if it still grew past twice the tenant's
// holder entries: the stale entries a push or a removal leaves are dropped
// at the rate they come.
func (t *Tree) probe(id uint32) {
	x := t.idx
	if int(id) >= len(x.heaps) {
		return
	}
	for range 2 {
		h := x.heaps[id]
		if len(h) == 0 {
			return
		}
		if i := int(x.rand() % uint64(len(h))); !t.stays(id, &h[i]) {
			x.removeAt(id, i)
		}
	}
	t.bound(id)
}

// bound compacts tenant id's heap if it grew past twice the tenant's
// holder entries (plus 64). A compaction leaves at most one entry per
// frontier pair, so the next one waits until the holder entries halve or
// the heap doubles: linear work spread over as many pushes or removals.
func (t *Tree) bound(id uint32) {
	if int(id) < len(t.idx.heaps) && len(t.idx.heaps[id]) > 2*t.tenants[id].refs+64 {
		t.compact(id)
	}
}

// compact drops every stale entry of tenant id's heap, and every entry of
// a pair but its earliest. Popping the earliest finds the pair's current
// key or pushes it again with it (evictEntry), so the later ones add
// nothing; and they are not stale, since stays asks only whether the pair
// is on the frontier. Where every touch pushes (MRU order), a leaf touched
// again and again piled up entries that no compaction dropped (FuzzTree:
// 71 entries for 3 holder entries).
func (t *Tree) compact(id uint32) {
	x := t.idx
	x.compactions++
	h := x.heaps[id]
	at := make(map[*node]int, len(h)) // a node's entry in kept
	kept := h[:0]
	for i := range h {
		if !t.stays(id, &h[i]) {
			continue
		}
		if j, ok := at[h[i].n]; ok {
			if x.less(&h[i], &kept[j]) {
				kept[j] = h[i]
			}
			continue
		}
		at[h[i].n] = len(kept)
		kept = append(kept, h[i])
	}
	clear(h[len(kept):])
	for i := len(kept)/2 - 1; i >= 0; i-- {
		x.down(kept, i)
	}
	x.heaps[id] = kept
	x.fixTop(id)
}

// stays reports whether e is not stale.
func (t *Tree) stays(id uint32, e *fentry) bool {
	_, ok := t.live(id, e)
	return ok
}

// evictEntry evicts e's pair (e popped from tenant id's heap) if e has its
// key, and returns the stored tokens removed; a stale entry is dropped, and
// one whose key moved on pushed again with its key. The caller holds the
// write lock.
func (t *Tree) evictEntry(id uint32, e fentry) int {
	h, ok := t.live(id, &e)
	if !ok {
		return 0
	}
	if !t.idx.sameKey(&e, h) {
		t.idx.push(id, fentry{e.n, h.tick, h.aux, h.confirmed()})
		return 0
	}
	evicted := len(e.n.tokens)
	t.dropHolder(e.n, e.n.holderIndex(id), false)
	return evicted
}

package tree

// Eviction works as an engine's does, per tenant: the unit is a (node,
// tenant) pair on the tenant's frontier (no child of the node held by the
// tenant), taken in the configured order; a node goes when its last holder
// does. An ancestor's key never orders before its descendants' under LRU
// (touching a node touches its ancestors), so taking the least recently used
// frontier pair each time evicts in true LRU order.
//
// Speculative holdings go before confirmed ones, whatever the order: a
// confirmed holding is what an engine said it holds (its KV events), and
// evicting one the engine still holds would make the tree wrong until the
// page is stored again, while a speculative one is only the router's
// expectation. Confirmed holdings are prefix-closed, so a speculative one is
// never an ancestor of a confirmed one, and the order stays one an engine
// could have followed.
//
// Evict first collects the frontier under the read lock (matches go on
// beside it), then evicts candidates in order from a heap it keeps with the
// lock released, under the write lock; both in slices of at most holdSlice,
// cut to minSlice when a selection waits (see slicer). Between slices the
// tree may change, so a popped candidate is checked again: still there,
// still on the frontier, key unchanged (else it goes back with its new key).

// The budget holds at all times, not only after Evict: an insert that takes
// the stored tokens over MaxTokens evicts, in the configured order and before
// it releases the write lock, until they are within it again. It pops the
// frontier index (frontier.go) rather than walking the tree, so it costs
// what it evicts: about the pages the insert added, a few heap operations
// each. Nobody ever sees the tree over budget. (A walk of the whole tree
// for the frontier held the lock for 5.6 s on a 64M-token tree of one-page
// nodes; it evicted down to a sixteenth under the budget so as to walk only
// once per MaxTokens/16 inserted tokens, which the index no longer needs.)
// The periodic Evict stays for decay and for a budget lowered meanwhile; it
// works in slices and rarely finds anything to do.

// enforceBudget evicts under the held write lock, if the last insert took
// the tree over budget, until it is within it.
func (t *Tree) enforceBudget() {
	if t.maxTokens == 0 || t.tokens <= t.maxTokens {
		return
	}
	x := t.index()
	for t.tokens > t.maxTokens {
		id, e, ok := x.popMin()
		if !ok {
			return
		}
		t.evictEntry(id, e)
	}
}

// frontier appends to dst every live tenant's frontier pairs. The caller
// holds the lock.
func (t *Tree) frontier(dst []cand) []cand {
	mark := make([]uint64, len(t.tenants)) // by tenant id: the visit that saw it on a child
	visit := uint64(0)
	stack := []*node{&t.root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		visit++
		for _, k := range n.kids {
			stack = append(stack, k.n)
			for _, hd := range k.n.holders {
				mark[hd.id()] = visit
			}
		}
		for _, hd := range n.holders {
			if mark[hd.id()] != visit && t.tenants[hd.id()].live {
				dst = append(dst, cand{n, hd.id(), hd.aux, hd.tick, hd.confirmed()})
			}
		}
	}
	return dst
}

// evictOne evicts candidate c if it is still valid, pushing it back with its
// new key if that changed, and pushing its parent if that joins the
// frontier. It returns the stored tokens removed. The caller holds the write
// lock.
func (t *Tree) evictOne(h *candHeap, c cand) int {
	n := c.n
	if n.deleted() || !t.tenants[c.tenant].live {
		return 0
	}
	i := n.holderIndex(c.tenant)
	if i < 0 || !n.leafFor(c.tenant) {
		return 0
	}
	if hd := n.holders[i]; hd.aux != c.aux || hd.tick != c.tick || hd.confirmed() != c.confirmed {
		c.aux, c.tick, c.confirmed = hd.aux, hd.tick, hd.confirmed()
		h.push(c)
		return 0
	}
	p := n.parent
	evicted := len(n.tokens)
	t.removeHolder(n, i)
	if p != &t.root && !p.deleted() {
		if j := p.holderIndex(c.tenant); j >= 0 && p.leafFor(c.tenant) {
			hd := p.holders[j]
			h.push(cand{p, c.tenant, hd.aux, hd.tick, hd.confirmed()})
		}
	}
	return evicted
}

// cand is an eviction candidate with the key it had when queued.
type cand struct {
	n         *node
	tenant    uint32
	aux       int32
	tick      uint64
	confirmed bool
}

// candHeap is a binary min-heap in eviction order: every speculative
// holding before every confirmed one, each kind in the configured order.
type candHeap struct {
	order order
	items []cand
}

func (h *candHeap) less(a, b *cand) bool {
	return keyLess(h.order, a.confirmed, a.aux, a.tick, b.confirmed, b.aux, b.tick)
}

// keyLess reports whether the holding keyed (ac, aa, at) goes before the
// one keyed (bc, ba, bt) under order o.
func keyLess(o order, ac bool, aa int32, at uint64, bc bool, ba int32, bt uint64) bool {
	if ac != bc {
		return !ac
	}
	switch o {
	case orderMRU, orderFILO:
		return at > bt
	case orderLFU, orderPriority:
		if aa != ba {
			return aa < ba
		}
	}
	return at < bt
}

func (h *candHeap) push(c cand) {
	h.items = append(h.items, c)
	i := len(h.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(&h.items[i], &h.items[p]) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

func (h *candHeap) pop() cand {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < last && h.less(&h.items[l], &h.items[m]) {
			m = l
		}
		if r := l + 1; r < last && h.less(&h.items[r], &h.items[m]) {
			m = r
		}
		if m == i {
			break
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
	return top
}

// Evict removes (node, tenant) pairs in the configured order until the
// stored tokens are within MaxTokens, and returns the stored tokens it
// removed. It never holds the lock much longer than holdSlice at a time.
// With MaxTokens 0 it does nothing.
func (t *Tree) Evict() (evictedTokens int) {
	if t.maxTokens == 0 {
		return 0
	}
	t.evictMu.Lock()
	defer t.evictMu.Unlock()
	h := &candHeap{order: t.order}
	for {
		chunks := t.collect()
		total := 0
		for _, c := range chunks {
			total += len(c)
		}
		h.items = make([]cand, 0, total+total/8) // room for parents joining
		for _, c := range chunks {
			h.items = append(h.items, c...)
		}
		if len(h.items) == 0 {
			return evictedTokens
		}
		h.heapify()
		n, done := t.evictFrom(h)
		evictedTokens += n
		if done || n == 0 {
			return evictedTokens
		}
	}
}

func (t *Tree) over() bool { return t.tokens > t.maxTokens }

// collect returns the frontier pairs of live tenants, if the tree is over
// budget. It gathers them in fixed-size chunks: growing one slice by
// doubling would copy millions of candidates in one step, under the lock.
func (t *Tree) collect() (chunks [][]cand) {
	s := slicer{t: t}
	s.lock()
	defer s.unlock()
	if !t.over() {
		return nil
	}
	chunk := make([]cand, 0, 4096)
	var mark []uint64 // by tenant id: the visit that saw it on a child
	visit := uint64(0)
	stack := []*node{&t.root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if cap(chunk)-len(chunk) < len(n.holders) {
			chunks = append(chunks, chunk)
			s.unlock() // allocate without holding up routing
			chunk = make([]cand, 0, max(4096, len(n.holders)))
			s.lock()
		}
		if n.deleted() && n != &t.root {
			continue
		}
		visit++
		if len(mark) < len(t.tenants) {
			mark = append(mark, make([]uint64, len(t.tenants)-len(mark))...)
		}
		for _, k := range n.kids {
			stack = append(stack, k.n)
			for _, hd := range k.n.holders {
				mark[hd.id()] = visit
			}
		}
		for _, hd := range n.holders {
			if mark[hd.id()] != visit && t.tenants[hd.id()].live {
				chunk = append(chunk, cand{n, hd.id(), hd.aux, hd.tick, hd.confirmed()})
			}
		}
		s.yield()
	}
	chunks = append(chunks, chunk)
	return chunks
}

// heapify orders h once, cheaper than pushing one by one. The heap is
// Evict's own, so this runs without the lock.
func (h *candHeap) heapify() {
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.siftDown(i)
	}
}

func (h *candHeap) siftDown(i int) {
	n := len(h.items)
	for {
		l, m := 2*i+1, i
		if l < n && h.less(&h.items[l], &h.items[m]) {
			m = l
		}
		if r := l + 1; r < n && h.less(&h.items[r], &h.items[m]) {
			m = r
		}
		if m == i {
			return
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
}

// evictBatch is how many candidates evictFrom takes off its heap per lock
// slice, at most.
const evictBatch = 256

// evictFrom pops and evicts candidates until the tree is within budget (done)
// or the heap is empty. When a pair goes, its parent may join the frontier.
//
// The heap is Evict's own, and with millions of candidates its operations
// (a cache miss per level) cost more than the evictions: so they run with
// the lock released. Before each slice the batch is topped up from the heap,
// in order; under the lock the slice evicts from the batch, where a parent
// that joins the frontier, or a candidate whose key changed, goes too. It
// stops where the heap's smallest candidate comes first, so the order is
// exactly the one a single heap gives.
func (t *Tree) evictFrom(h *candHeap) (evicted int, done bool) {
	s := slicer{t: t, write: true}
	batch := &candHeap{order: h.order, items: make([]cand, 0, 2*evictBatch)}
	for len(h.items) > 0 || len(batch.items) > 0 {
		// Top up outside the lock; taking at least every candidate that
		// comes before the batch's first means every slice progresses.
		for len(h.items) > 0 && (len(batch.items) < evictBatch || h.less(&h.items[0], &batch.items[0])) {
			batch.push(h.pop())
		}
		s.lock()
		for len(batch.items) > 0 && t.over() {
			if len(h.items) > 0 && h.less(&h.items[0], &batch.items[0]) {
				break // a candidate still in the heap goes first
			}
			evicted += t.evictOne(batch, batch.pop())
			if s.due() {
				break
			}
		}
		over := t.over()
		s.unlock()
		if !over {
			return evicted, true
		}
		s.stepAside()
	}
	return evicted, false
}

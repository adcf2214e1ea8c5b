package tree

// Eviction works as an engine's does, per tenant: the unit is a (node,
// tenant) pair on the tenant's frontier (no child of the node held by the
// tenant), taken in the configured order; a node goes when its last holder
// does. An ancestor's key never orders before its descendants' under LRU
// (touching a node touches its ancestors), so taking the least recently used
// frontier pair each time evicts in true LRU order.
//
// Evict first collects the frontier under the read lock (matches go on
// beside it), then pops candidates from a heap under the write lock; both in
// slices of about holdSlice. Between slices the tree may change, so a popped
// candidate is checked again: still there, still on the frontier, key
// unchanged (else it goes back with its new key).

// cand is an eviction candidate with the key it had when queued.
type cand struct {
	n      *node
	tenant uint32
	aux    int32
	tick   uint64
}

// candHeap is a binary min-heap in eviction order.
type candHeap struct {
	order order
	items []cand
}

func (h *candHeap) less(a, b *cand) bool {
	switch h.order {
	case orderMRU, orderFILO:
		return a.tick > b.tick
	case orderLFU, orderPriority:
		if a.aux != b.aux {
			return a.aux < b.aux
		}
	}
	return a.tick < b.tick
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
				mark[hd.tenant] = visit
			}
		}
		for _, hd := range n.holders {
			if mark[hd.tenant] != visit && t.tenants[hd.tenant].live {
				chunk = append(chunk, cand{n, hd.tenant, hd.aux, hd.tick})
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

// evictFrom pops and evicts candidates until the tree is within budget (done)
// or the heap is empty. When a pair goes, its parent may join the frontier.
func (t *Tree) evictFrom(h *candHeap) (evicted int, done bool) {
	s := slicer{t: t, write: true}
	s.lock()
	defer s.unlock()
	for len(h.items) > 0 {
		if !t.over() {
			return evicted, true
		}
		s.yield()
		c := h.pop()
		n := c.n
		if n.deleted() || !t.tenants[c.tenant].live {
			continue
		}
		i := n.holderIndex(c.tenant)
		if i < 0 || !n.leafFor(c.tenant) {
			continue
		}
		if hd := n.holders[i]; hd.aux != c.aux || hd.tick != c.tick {
			c.aux, c.tick = hd.aux, hd.tick
			h.push(c)
			continue
		}
		p := n.parent
		evicted += len(n.tokens)
		t.removeHolder(n, i)
		if p != &t.root && !p.deleted() {
			if j := p.holderIndex(c.tenant); j >= 0 && p.leafFor(c.tenant) {
				hd := p.holders[j]
				h.push(cand{p, c.tenant, hd.aux, hd.tick})
			}
		}
	}
	return evicted, !t.over()
}

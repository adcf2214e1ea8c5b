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
// The frontier index (frontier.go) gives the frontier in that order, so
// eviction, inline or periodic, pops it and costs what it evicts, not what
// the tree holds.

// The budget holds at all times, not only after Evict: an insert that takes
// the stored tokens over MaxTokens evicts, in the configured order and before
// it releases the write lock, until they are within it again: about the
// pages the insert added, a few heap operations each. Nobody ever sees the
// tree over budget. (A walk of the whole tree for the frontier held the
// lock for 5.6 s on a 64M-token tree of one-page nodes; it evicted down to a
// sixteenth under the budget so as to walk only once per MaxTokens/16
// inserted tokens, which the index no longer needs.) The periodic Evict
// stays for decay and for a budget lowered meanwhile; it works in slices and
// rarely finds anything to do.

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

// cand is a frontier pair with its key.
type cand struct {
	n         *node
	tenant    uint32
	aux       int32
	tick      uint64
	confirmed bool
}

// keyLess reports whether the holding keyed (ac, aa, at) goes before the
// one keyed (bc, ba, bt) under order o: every speculative holding before
// every confirmed one, each kind in the configured order.
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

// Evict removes (node, tenant) pairs in the configured order until the
// stored tokens are within MaxTokens, and returns the stored tokens it
// removed. It pops the frontier index under the write lock, in slices of
// at most holdSlice, cut to minSlice when a selection waits (see slicer).
// With MaxTokens 0 it does nothing.
func (t *Tree) Evict() (evictedTokens int) {
	if t.maxTokens == 0 {
		return 0
	}
	t.evictMu.Lock()
	defer t.evictMu.Unlock()
	s := slicer{t: t, write: true}
	s.lock()
	defer s.unlock()
	x := t.index()
	for t.over() {
		id, e, ok := x.popMin()
		if !ok {
			break
		}
		evictedTokens += t.evictEntry(id, e)
		if s.due() {
			s.pause()
		}
	}
	return evictedTokens
}

func (t *Tree) over() bool { return t.tokens > t.maxTokens }

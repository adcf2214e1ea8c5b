package tree

// A completed request's reply joins its prompt in the tree: engines keep
// both in their prefix cache, so the next turn of a conversation, which
// repeats the reply, is predicted exactly. Inserting prompt+reply from the
// root would copy the prompt into a new slice (an 8K-token prompt is 32 KiB,
// the largest allocation of a request after the tokenizer's) and descend it
// a second time under the write lock, though the selection's insert has just
// walked it. Extend continues below where that insert ended instead.
//
// The tree remembers where its latest inserts ended, by tick, in a ring
// (endRing): the caller keeps only the tick it already keeps for
// ExpireSpeculative, and a node pointer never leaves the package. Nodes are
// never merged or reused, and a split keeps the lower half in the old node,
// so a remembered node that is not deleted still ends exactly where the
// insert ended; if the tenant still holds it, it holds the whole path above
// (holdings are prefix-closed).

// endSlots bounds the ring: 512 KiB at most, and what it keeps alive of
// nodes deleted meanwhile (a node struct each, their tokens freed) stays
// under a few MiB. Each request makes two inserts (its selection, its reply)
// and KV events a few more, so it covers thousands of requests in flight;
// older ticks fall back to the full insert.
const endSlots = 1 << 15

// endRing maps the latest inserts' ticks to the node each ended at. It grows
// with the clock up to endSlots, so a small tree (a test's) keeps a small
// ring.
type endRing struct{ slots []insertEnd }

type insertEnd struct {
	tick uint64
	n    *node
}

// remember records that the insert at tick ended at n. The caller holds
// the write lock.
func (r *endRing) remember(tick uint64, n *node) {
	if uint64(len(r.slots)) <= tick && len(r.slots) < endSlots {
		old := r.slots
		r.slots = make([]insertEnd, min(endSlots, max(64, 2*len(old))))
		for _, e := range old {
			if e.n != nil {
				r.slots[e.tick%uint64(len(r.slots))] = e
			}
		}
	}
	r.slots[tick%uint64(len(r.slots))] = insertEnd{tick, n}
}

// lookup returns where the insert at tick ended, nil if the ring has
// forgotten it. The caller holds the lock.
func (r *endRing) lookup(tick uint64) *node {
	if tick == 0 || len(r.slots) == 0 {
		return nil
	}
	if e := r.slots[tick%uint64(len(r.slots))]; e.tick == tick {
		return e.n
	}
	return nil
}

// maxKeptSeq bounds, in tokens, the buffer a pooled scratch keeps for
// Extend between calls.
const maxKeptSeq = 1 << 16

// Extend records that tenant holds prompt followed by reply (the whole pages
// of the two together), as InsertSpeculative of their concatenation would,
// and returns the insert's tick. tick is what the prompt's own insert for
// tenant returned (Match.Tick from MatchInsert, MatchInsertAmong's or
// InsertSpeculative's): Extend inserts the reply below where that insert
// ended, touching the prompt's path on the way, without descending the
// prompt again or copying it. If the tree no longer knows that node, or it
// no longer ends the tenant's path for prompt (evicted or trimmed meanwhile,
// the tenant removed, tick 0 or too old), Extend falls back to inserting
// the whole sequence from the root.
func (t *Tree) Extend(tick uint64, prompt, reply []uint32, tenant string) uint64 {
	ps := t.pageSize
	total := len(prompt) + len(reply)
	total -= total % ps
	if total == 0 || tenant == "" {
		return 0
	}
	head := len(prompt) - len(prompt)%ps
	// The reply's part below the prompt starts with the prompt's partial
	// last page: built before taking the lock, at most a page plus the
	// reply.
	s := t.pool.Get().(*scratch)
	s.seq = append(append(s.seq[:0], prompt[head:]...), reply...)[:total-head]
	t.lockSelection()
	var id uint32
	if top := t.endOf(tick, prompt[:head], tenant); top != nil {
		pos := t.descendFrom(top, s.seq, s)
		id = t.insertBelow(top, s.seq, pos, s.path, tenant, 0, false)
	} else {
		s.seq = append(append(s.seq[:0], prompt...), reply...)[:total]
		pos := t.descend(s.seq, s)
		id = t.insert(s.seq, pos, s.path, tenant, 0, false)
	}
	tick = t.clock
	t.enforce(id)
	t.mu.Unlock()
	if cap(s.seq) > maxKeptSeq {
		s.seq = nil
	}
	clear(s.path) // the pool keeps no node alive
	s.path = s.path[:0]
	t.pool.Put(s)
	return tick
}

// endOf returns the node the insert at tick ended at, if tenant still holds
// it and it ends prompt's path (its depth and last page agree). The caller
// holds the lock.
func (t *Tree) endOf(tick uint64, prompt []uint32, tenant string) *node {
	n := t.ends.lookup(tick)
	if n == nil || n.deleted() || len(prompt) == 0 {
		return nil
	}
	id, ok := t.ids[tenant]
	if !ok || n.holderIndex(id) < 0 || !t.endsPath(n, len(prompt), prompt[len(prompt)-t.pageSize:]) {
		return nil
	}
	return n
}

// endsPath reports whether n ends a path of depth tokens whose last page is
// last: the check that a node remembered by tick ends the sequence its
// caller names.
func (t *Tree) endsPath(n *node, depth int, last []uint32) bool {
	d := 0
	for a := n; a != &t.root; a = a.parent {
		d += len(a.tokens)
	}
	return d == depth && equal(n.tokens[len(n.tokens)-t.pageSize:], last)
}

package tree

import (
	"runtime"
	"time"
)

// Evict and RemoveTenant hold the tree's lock in slices. A slice ends after
// holdSlice, or after minSlice once a selection is waiting: the issue allows
// a selection to wait about 1 ms on them, and the wait a selection sees is
// what is left of the current slice (plus the scheduler's handover). The
// budget is measured in time, not in steps, because a step's cost varies by
// tree shape: a node of a one-page-node trie and an 8K-token node differ a
// hundredfold. minSlice keeps the work progressing under steady traffic:
// otherwise a stream of selections, each arriving as the last leaves, would
// take every slice's turn.
const (
	holdSlice = 200 * time.Microsecond
	minSlice  = 20 * time.Microsecond
)

// slicer holds the tree's lock in slices (see holdSlice), for work that
// walks much of the tree. Between slices the tree may change, so such work
// must hold only node pointers (checking deleted) across yield.
type slicer struct {
	t     *Tree
	write bool
	start time.Time
	n     int
}

func (s *slicer) lock() {
	if s.write {
		s.t.mu.Lock()
	} else {
		s.t.mu.RLock()
	}
	s.start = time.Now()
	if s.t.onSlice != nil {
		s.t.onSlice(true)
	}
}

func (s *slicer) unlock() {
	if s.t.onSlice != nil {
		s.t.onSlice(false)
	}
	if s.write {
		s.t.mu.Unlock()
	} else {
		s.t.mu.RUnlock()
	}
}

// due reports whether the slice is used up: holdSlice spent, or minSlice
// spent with a selection waiting. The atomic load is checked every step, so
// a waiting selection is noticed at once; the clock only every few steps
// when nobody waits, to keep its cost out of the profile.
func (s *slicer) due() bool {
	s.n++
	if s.t.waiting.Load() > 0 {
		return time.Since(s.start) >= minSlice
	}
	return s.n%8 == 0 && time.Since(s.start) >= holdSlice
}

// yield releases the lock for a moment once the slice is used up.
func (s *slicer) yield() {
	if s.due() {
		s.pause()
	}
}

// pause ends the slice: it releases the lock, lets the waiting selections
// in, and takes the lock again.
func (s *slicer) pause() {
	s.unlock()
	s.stepAside()
	s.lock()
}

// stepAside runs with the lock released: it lets the selections waiting for
// the lock take it before the work goes on. sync.Mutex lets the unlocker
// barge back in, and would hand over only after 1 ms.
func (s *slicer) stepAside() {
	runtime.Gosched()
	for i := 0; i < 100 && s.t.waiting.Load() > 0; i++ {
		runtime.Gosched()
	}
}

// Trim makes tenant hold at most keep tokens (rounded down to whole pages) of
// ids' path: the node where ids continue past keep, and everything below it,
// lose the tenant, confirmed and speculative holdings alike. The cache_aware
// policy calls it when an engine reports it had less cached than the tree
// predicted, since the engine evicted that part (and, its cache being
// prefix-closed, everything that extends it); a KV removal event does the
// same with the removed page's path (Mirror's PageRun) and keep its start.
func (t *Tree) Trim(ids []uint32, tenant string, keep int) {
	ps := t.pageSize
	ids = t.cut(ids)
	keep = max(0, keep-keep%ps)
	if keep >= len(ids) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	id, ok := t.ids[tenant]
	if !ok {
		return
	}
	n, pos := &t.root, 0
	for pos < keep {
		c := n.child(t.key(ids[pos:pos+ps]), ids[pos:pos+ps])
		if c == nil {
			return
		}
		l := t.common(c, ids[pos:])
		if pos+l <= keep {
			if l < len(c.tokens) {
				return // ids leave the tree before keep
			}
			n, pos = c, pos+l
			continue
		}
		// c runs through keep: cut it there so the tenant can keep the top.
		if c.holderIndex(id) < 0 {
			return
		}
		n, pos = t.split(c, keep-pos), keep
	}
	c := n.child(t.key(ids[keep:keep+ps]), ids[keep:keep+ps])
	if c == nil || c.holderIndex(id) < 0 {
		return
	}
	t.dropBelow(c, id)
}

// dropBelow removes tenant id from c and everything below c, and returns the
// stored tokens removed. The caller holds the write lock and has checked
// that id holds c.
func (t *Tree) dropBelow(c *node, id uint32) (tokens int) {
	for _, n := range t.heldBelow(c, id, nil) {
		if i := n.holderIndex(id); i >= 0 {
			tokens += len(n.tokens)
			t.removeHolder(n, i)
		}
	}
	return tokens
}

// ExpireSpeculative undoes one routing decision's speculative insert for
// tenant, made at tick (Match.Tick from MatchInsert), if no KV event
// confirmed it meanwhile. Along ids' path it finds the first node the tenant
// holds speculatively and last touched at or before tick, and drops the
// tenant's holdings there and below; it returns the stored tokens dropped.
//
// Dropping the whole subtree is right because every insert touches its whole
// path: nothing below that node was touched later, and (confirmed holdings
// being prefix-closed) nothing below it is confirmed. Nodes above it stay:
// they are confirmed, or a later decision touched them and will expire them
// itself. A tick of 0 (MatchInsert inserted nothing) expires nothing. The
// cost is ids' path plus what is dropped, not the tree.
func (t *Tree) ExpireSpeculative(ids []uint32, tenant string, tick uint64) (expiredTokens int) {
	return t.ExpireSpeculativeReply(ids, nil, tenant, tick)
}

// ExpireSpeculativeReply is ExpireSpeculative of prompt followed by reply
// (Extend's insert, whose tick it takes), without the caller joining the
// two into one slice.
//
// With KV events, the engine has usually confirmed the whole insert by the
// time it expires, and the descent that finds nothing to drop was most of
// what expiry cost (hashing the path's pages again and searching each
// node's children, in memory gone cold since the insert). So when the
// node the insert ended at (remembered by tick, as for Extend) is still
// held confirmed, nothing is dropped without a descent: confirmed holdings
// are prefix-closed, so the whole path is confirmed. The remembered node is
// checked to end prompt+reply's path by its depth and last page, as Extend
// checks it; callers pass the sequence the insert at tick inserted.
func (t *Tree) ExpireSpeculativeReply(prompt, reply []uint32, tenant string, tick uint64) (expiredTokens int) {
	s := cutPair(prompt, reply, t.pageSize)
	if tick == 0 || s.len() == 0 {
		return 0
	}
	t.lockSelection()
	defer t.mu.Unlock()
	id, ok := t.ids[tenant]
	if !ok || t.confirmedEnd(tick, id, s) {
		return 0
	}
	return t.expireWalk(s, id, tick)
}

// confirmedEnd reports whether the insert at tick ended at a node that
// ends s's path and that tenant id holds confirmed. The caller holds the
// lock.
func (t *Tree) confirmedEnd(tick uint64, id uint32, s pair) bool {
	n := t.ends.lookup(tick)
	if n == nil || n.deleted() {
		return false
	}
	if i := n.holderIndex(id); i < 0 || !n.holders[i].confirmed() {
		return false
	}
	last, _ := s.page(s.len()-t.pageSize, t.pageSize, nil)
	return t.endsPath(n, s.len(), last)
}

// expireWalk is ExpireSpeculativeReply's descent along s: it drops tenant
// id's holdings from the first node it holds speculatively and last
// touched at or before tick. The caller holds the lock.
func (t *Tree) expireWalk(s pair, id uint32, tick uint64) int {
	ps := t.pageSize
	var buf []uint32 // a page across the two parts
	n, pos := &t.root, 0
	for pos < s.len() {
		var page []uint32
		page, buf = s.page(pos, ps, buf)
		c := n.child(t.key(page), page)
		if c == nil {
			return 0
		}
		i := c.holderIndex(id)
		if i < 0 {
			return 0
		}
		if h := c.holders[i]; !h.confirmed() && t.touchedBy(h, tick) {
			return t.dropBelow(c, id)
		}
		var l int
		if a, _ := s.from(pos); len(c.tokens) <= len(a) {
			l = t.common(c, a) // c lies within the first part: by chunk keys
		} else {
			l = ps + s.commonPrefix(c.tokens[ps:], pos+ps, ps)
		}
		if l < len(c.tokens) {
			return 0 // ids end or leave the tree inside c
		}
		n, pos = c, pos+l
	}
	return 0
}

// pair is a token sequence in two parts, a then b, both whole pages
// together (cutPair).
type pair struct{ a, b []uint32 }

// cutPair is a followed by b, cut to whole pages.
func cutPair(a, b []uint32, ps int) pair {
	n := len(a) + len(b)
	n -= n % ps
	if n <= len(a) {
		return pair{a[:n], nil}
	}
	return pair{a, b[:n-len(a)]}
}

func (p pair) len() int { return len(p.a) + len(p.b) }

// from returns the sequence from pos on, as two parts.
func (p pair) from(pos int) ([]uint32, []uint32) {
	if pos <= len(p.a) {
		return p.a[pos:], p.b
	}
	return nil, p.b[pos-len(p.a):]
}

// page returns the ps tokens at pos: a slice of one part, or of buf when
// the page spans both (buf is returned for reuse).
func (p pair) page(pos, ps int, buf []uint32) (page, _ []uint32) {
	a, b := p.from(pos)
	if len(a) >= ps {
		return a[:ps], buf
	}
	if len(a) == 0 {
		return b[:ps], buf
	}
	buf = append(append(buf[:0], a...), b[:ps-len(a)]...)
	return buf, buf
}

// commonPrefix is commonPrefix of tokens and the sequence from pos on.
func (p pair) commonPrefix(tokens []uint32, pos, ps int) int {
	a, b := p.from(pos)
	n := min(len(tokens), len(a))
	if !equal(tokens[:n], a[:n]) || n == len(tokens) || len(b) == 0 {
		return commonPrefix(tokens, a, ps)
	}
	// tokens continue past a: the rest is compared with b.
	l := n + commonPrefix(tokens[n:], b, 1)
	return l - l%ps
}

// heldBelow appends to dst the nodes of c's subtree held by tenant id,
// deepest last reversed: the result lists every node after all of its
// descendants, so removing the tenant in that order keeps its holdings
// prefix-closed and lets empty nodes go at once. Holdings are prefix-closed,
// so the walk never enters a subtree the tenant does not hold.
func (t *Tree) heldBelow(c *node, id uint32, dst []*node) []*node {
	start := len(dst)
	stack := []*node{c}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		dst = append(dst, n)
		for _, k := range n.kids {
			if k.n.holderIndex(id) >= 0 {
				stack = append(stack, k.n)
			}
		}
	}
	for i, j := start, len(dst)-1; i < j; i, j = i+1, j-1 {
		dst[i], dst[j] = dst[j], dst[i]
	}
	return dst
}

// RemoveTenant forgets a tenant (a worker that left), its settings
// (SetTenantLimit) included. The tenant disappears from matches and stats at
// once; its holder entries are then swept in slices, so a large tenant does
// not stall routing. A tenant of the same name inserted meanwhile starts
// afresh.
func (t *Tree) RemoveTenant(tenant string) { t.drop(tenant, true) }

// ClearTenant drops everything tenant holds, confirmed and speculative, but
// keeps its settings: for an engine that cleared its cache (or whose event
// stream was reset) and stays in the fleet. Like RemoveTenant it works in
// slices, and inserts for the name meanwhile start afresh.
func (t *Tree) ClearTenant(tenant string) { t.drop(tenant, false) }

// drop retires tenant's id: the name is unbound at once (a later insert
// interns a fresh id) and the old id's entries are swept in slices.
func (t *Tree) drop(tenant string, settings bool) {
	t.lockSelection()
	if settings {
		delete(t.limits, tenant)
	}
	id, ok := t.ids[tenant]
	if !ok {
		t.mu.Unlock()
		return
	}
	delete(t.ids, tenant)
	t.bindings++
	tn := &t.tenants[id]
	tn.live = false
	t.tokens -= tn.tokens
	t.confirmed -= tn.confirmed
	tn.tokens, tn.confirmed = 0, 0
	t.mu.Unlock()
	t.sweep(id)
}

// sweep removes a dead tenant's holder entries and frees its id once none is
// left. Splits during a pass may copy the tenant to new nodes, so it passes
// again while entries remain (a few times at most: after that the id is not
// reused, which costs only its slot).
func (t *Tree) sweep(id uint32) {
	s := slicer{t: t, write: true}
	s.lock()
	defer s.unlock()
	var nodes []*node
	for pass := 0; pass < 4 && t.tenants[id].refs > 0; pass++ {
		// Collect top-down (the tenant's nodes form a subtree of the
		// root), then remove bottom-up.
		nodes = nodes[:0]
		stack := []*node{&t.root}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if n.deleted() && n != &t.root {
				continue
			}
			if n != &t.root {
				nodes = append(nodes, n)
			}
			for _, k := range n.kids {
				if k.n.holderIndex(id) >= 0 {
					stack = append(stack, k.n)
				}
			}
			s.yield()
		}
		if t.sweepPause != nil {
			s.unlock()
			t.sweepPause()
			s.lock()
		}
		// Remove bottom-up. A node split since it was collected has a new
		// upper half, not on the list, that copied the tenant; it sits
		// between a listed node and its listed parent. Removing the parent's
		// entry before it would leave the parent held by nobody above a
		// node the tenant still holds, where no later pass can reach it
		// (passes only descend through the tenant's nodes). So each node
		// first loses the tenant from whatever below it still holds it:
		// usually nothing, since its listed descendants went first.
		var below []*node
		for i := len(nodes) - 1; i >= 0; i-- {
			n := nodes[i]
			if n.deleted() || n.holderIndex(id) < 0 {
				continue
			}
			below = t.heldBelow(n, id, below[:0])
			for _, b := range below {
				if j := b.holderIndex(id); j >= 0 {
					t.removeHolder(b, j)
				}
			}
			s.yield()
		}
	}
	if t.tenants[id].refs == 0 {
		t.tenants[id] = tenant{}
		t.free = append(t.free, id)
	}
}

package tree

// Match is the result of matching a prompt against every tenant.
type Match struct {
	// Input is the prompt's length cut down to whole pages.
	Input int
	// Tenants lists every tenant holding at least one page of the prompt, in
	// no particular order.
	Tenants []TenantMatch
	// Tick is the logical time of the speculative insert MatchInsert made
	// for the tenant it chose, for ExpireSpeculative to undo it later; 0 if
	// it inserted nothing, and always 0 from Match and in the Match choose
	// sees. It lives here rather than in a third result so that callers of
	// MatchInsert that never expire anything stay as they are.
	Tick uint64
}

// TenantMatch is how much of a prompt one tenant holds.
type TenantMatch struct {
	Tenant string
	Tokens int // whole pages only
	// Confirmed is the part of Tokens the tenant's engine confirmed with a
	// KV event (the rest is speculative): Confirmed <= Tokens.
	Confirmed int
}

// Of returns the tokens matched for tenant, 0 if it holds none.
func (m Match) Of(tenant string) int {
	for _, tm := range m.Tenants {
		if tm.Tenant == tenant {
			return tm.Tokens
		}
	}
	return 0
}

// step is one node on a prompt's path and how many of its tokens matched.
type step struct {
	n *node
	l int
}

// reach is how far along a prompt's path a tenant holds, and holds
// confirmed.
type reach struct{ tokens, confirmed int32 }

// scratch holds one descent's working state, reused so a selection does not
// allocate beyond its result.
type scratch struct {
	path []step
	best []reach  // by tenant id: tokens matched so far
	seen []uint32 // ids with best.tokens > 0
	seq  []uint32 // Extend's prompt and reply, or the reply's part below the prompt
}

// descend walks ids (whole pages) from the root as far as the tree matches
// and records the path; it returns the matched length. It only reads.
func (t *Tree) descend(ids []uint32, s *scratch) int { return t.descendFrom(&t.root, ids, s) }

// descendFrom is descend from node top, ids being what follows top's path.
func (t *Tree) descendFrom(top *node, ids []uint32, s *scratch) int {
	ps := t.pageSize
	s.path = s.path[:0]
	n, pos := top, 0
	for pos < len(ids) {
		c := n.child(t.key(ids[pos:pos+ps]), ids[pos:pos+ps])
		if c == nil {
			break
		}
		l := t.common(c, ids[pos:])
		pos += l
		s.path = append(s.path, step{c, l})
		if l < len(c.tokens) {
			break
		}
		n = c
	}
	return pos
}

// result turns the recorded path into a Match whose Tenants are appended
// to dst[:0]. A tenant's match is the end of the deepest path node it holds;
// holdings are prefix-closed, so that is also the longest prefix it holds.
// The same goes for confirmed holdings.
func (t *Tree) result(dst []TenantMatch, input int, s *scratch) Match {
	if len(s.best) < len(t.tenants) {
		s.best = make([]reach, len(t.tenants)+8)
	}
	pos := 0
	for _, st := range s.path {
		pos += st.l
		for _, h := range st.n.holders {
			r := &s.best[h.id()]
			if r.tokens == 0 {
				s.seen = append(s.seen, h.id())
			}
			r.tokens = int32(pos)
			if h.confirmed() {
				r.confirmed = int32(pos)
			}
		}
	}
	m := Match{Input: input, Tenants: dst[:0]}
	live := 0
	for _, id := range s.seen {
		if t.tenants[id].live {
			live++
		}
	}
	if live > cap(dst) {
		m.Tenants = make([]TenantMatch, 0, live)
	}
	for _, id := range s.seen {
		if t.tenants[id].live {
			r := s.best[id]
			m.Tenants = append(m.Tenants, TenantMatch{t.tenants[id].name, int(r.tokens), int(r.confirmed)})
		}
		s.best[id] = reach{}
	}
	s.seen = s.seen[:0]
	return m
}

// Match returns, for each tenant holding any of it, the longest whole-page
// prefix of ids the tenant holds. It changes nothing (Explain uses it) and
// runs under the read lock, beside other readers.
func (t *Tree) Match(ids []uint32) Match { return t.MatchAppend(nil, ids) }

// MatchAppend is Match with the result's Tenants appended to dst[:0], for
// callers that match many prompts: with 128 workers holding a prompt's
// first page the Tenants of a Match take 5 KB, and allocating them was
// most of a lookup's p99 in the indexer benchmark (BENCHMARKS.md).
func (t *Tree) MatchAppend(dst []TenantMatch, ids []uint32) Match {
	ids = t.cut(ids)
	s := t.pool.Get().(*scratch)
	t.rlockSelection()
	t.descend(ids, s)
	m := t.result(dst, len(ids), s)
	t.mu.RUnlock()
	t.pool.Put(s)
	return m
}

// MatchInsert matches ids against every tenant, asks choose which tenant
// will serve them ("" for none), and inserts ids' whole pages for that
// tenant along the path it already found: one descent for the selection and
// the update. The insert is speculative (the engine will hold the prompt once
// it ran it): holdings already confirmed stay confirmed, and the returned
// Match's Tick lets the caller expire the rest with ExpireSpeculative if no
// KV event confirms them. choose runs under the tree's lock: it must be quick
// and must not call the tree. It returns the match and choose's answer.
func (t *Tree) MatchInsert(ids []uint32, choose func(Match) string) (Match, string) {
	return t.MatchInsertPriority(ids, 0, choose)
}

// MatchInsertPriority is MatchInsert with the request's priority, which the
// "priority" eviction order keeps per (node, tenant) as the highest seen.
func (t *Tree) MatchInsertPriority(ids []uint32, priority int32, choose func(Match) string) (Match, string) {
	ids = t.cut(ids)
	t.lockSelection()
	defer t.mu.Unlock()
	s := &t.scratch
	pos := t.descend(ids, s)
	m := t.result(nil, len(ids), s)
	name := choose(m)
	if name != "" && len(ids) > 0 {
		id := t.insert(ids, pos, s.path, name, priority, false)
		m.Tick = t.clock
		t.enforce(id)
	}
	return m, name
}

// Insert records that tenant now holds ids' whole pages (and so every prefix
// of them), touching them for eviction. Like MatchInsert, it inserts
// speculative holdings and leaves confirmed ones confirmed.
func (t *Tree) Insert(ids []uint32, tenant string) { t.InsertPriority(ids, tenant, 0) }

// InsertPriority is Insert with the request's priority.
func (t *Tree) InsertPriority(ids []uint32, tenant string, priority int32) {
	t.insertPath(ids, tenant, priority, false)
}

// InsertConfirmed records that tenant's engine reported holding ids' whole
// pages (a KV event): it inserts them as Insert does and marks every holding
// along the path confirmed, the ancestors' included, so confirmed holdings
// stay prefix-closed as the engine's cache is. The caller passes the full
// path from the root (Mirror's PageRun.Path).
func (t *Tree) InsertConfirmed(ids []uint32, tenant string) { t.insertPath(ids, tenant, 0, true) }

// InsertSpeculative is Insert that returns the insert's tick, for
// ExpireSpeculative, as MatchInsert's Match.Tick does (0 if it inserted
// nothing). It is for callers that choose the tenant themselves: it does not
// build a Match, whose Tenants has an entry for every tenant holding part of
// ids (every worker, for a prompt starting with a chat template's header).
func (t *Tree) InsertSpeculative(ids []uint32, tenant string) (tick uint64) {
	return t.insertPath(ids, tenant, 0, false)
}

// insertPath inserts ids for tenant and returns the insert's tick, 0 if it
// inserted nothing.
func (t *Tree) insertPath(ids []uint32, tenant string, priority int32, confirm bool) (tick uint64) {
	ids = t.cut(ids)
	if len(ids) == 0 || tenant == "" {
		return 0
	}
	t.lockSelection()
	defer t.mu.Unlock()
	s := &t.scratch
	pos := t.descend(ids, s)
	id := t.insert(ids, pos, s.path, tenant, priority, confirm)
	tick = t.clock
	t.enforce(id)
	return tick
}

// insert adds tenant along a path descend found: every path node (the last
// one split where the match ended inside it, so the tenant holds exactly the
// prompt and eviction sees exactly what was touched), then a new leaf for
// what the tree did not hold. It returns the tenant's id; the insert's tick
// is t.clock.
func (t *Tree) insert(ids []uint32, pos int, path []step, name string, priority int32, confirm bool) uint32 {
	return t.insertBelow(&t.root, ids, pos, path, name, priority, confirm)
}

// insertBelow is insert along a path descendFrom(top) found: it touches top
// and its ancestors too, so that, as after any insert, the tenant's whole
// path carries the insert's tick (ExpireSpeculative relies on it). It
// remembers where the insert ended, for Extend.
func (t *Tree) insertBelow(top *node, ids []uint32, pos int, path []step, name string, priority int32, confirm bool) uint32 {
	id := t.intern(name)
	t.clock++
	now := t.clock
	for a := top; a != &t.root; a = a.parent {
		t.touch(a, id, now, priority, confirm)
	}
	parent, added := top, false
	for _, st := range path {
		n := st.n
		if st.l < len(n.tokens) {
			n = t.split(n, st.l)
		}
		added = t.touch(n, id, now, priority, confirm)
		parent = n
	}
	if pos < len(ids) {
		leaf := &node{tokens: clone(ids[pos:]), parent: parent}
		leaf.keys = t.chunkKeys(leaf.tokens)
		parent.addKid(leaf, t.key(leaf.tokens[:t.pageSize]))
		t.nodes++
		t.unique += len(leaf.tokens)
		added = t.touch(leaf, id, now, priority, confirm)
		parent = leaf
	}
	t.ends.remember(now, parent)
	// The frontier index learns of the one node of the path that can be on
	// the tenant's frontier, if the holding is new there, or if touching it
	// moved it earlier in the order (MRU; see frontier.go).
	if t.idx != nil && (added || t.order == orderMRU) {
		t.noteFrontier(parent, id, true)
	}
	return id
}

func clone(s []uint32) []uint32 {
	c := make([]uint32, len(s))
	copy(c, s)
	return c
}

// touch records an access by tenant id to n, adding the tenant if new, and
// confirms the holding if confirm is set (a confirmed holding never goes
// back to speculative).
//
// Every touch also stamps the holding's last access, which ExpireSpeculative
// compares with a decision's tick. Orders that keep the last access in tick
// already have it; FIFO and FILO keep the creation time there and stamp the
// last access's low 32 bits into aux, which they do not otherwise use.
// It reports whether the tenant's holding of n is new.
func (t *Tree) touch(n *node, id uint32, now uint64, priority int32, confirm bool) (added bool) {
	if i := n.holderIndex(id); i >= 0 {
		h := &n.holders[i]
		switch t.order {
		case orderLRU, orderMRU:
			h.tick = now
		case orderLFU:
			h.tick = now
			if h.aux < 1<<31-1 {
				h.aux++
			}
		case orderPriority:
			h.tick = now
			h.aux = max(h.aux, priority)
		case orderFIFO, orderFILO:
			h.aux = int32(uint32(now))
		}
		if confirm && !h.confirmed() {
			h.word |= confirmedBit
			t.tenants[id].confirmed += len(n.tokens)
			t.confirmed += len(n.tokens)
		}
		return false
	}
	h := holder{word: id, tick: now}
	switch t.order {
	case orderLFU:
		h.aux = 1
	case orderPriority:
		h.aux = priority
	case orderFIFO, orderFILO:
		h.aux = int32(uint32(now))
	}
	tn := &t.tenants[id]
	if confirm {
		h.word |= confirmedBit
		tn.confirmed += len(n.tokens)
		t.confirmed += len(n.tokens)
	}
	n.holders = append(n.holders, h)
	tn.refs++
	tn.tokens += len(n.tokens)
	t.tokens += len(n.tokens)
	return true
}

// touchedBy reports whether holding h was last accessed at or before tick.
// FIFO and FILO compare the low 32 bits in serial-number arithmetic (see
// touch), which is exact while the two are less than 2^31 inserts apart:
// hours of traffic, where an expiry comes seconds after its decision.
func (t *Tree) touchedBy(h holder, tick uint64) bool {
	if t.order == orderFIFO || t.order == orderFILO {
		return int32(uint32(tick)-uint32(h.aux)) >= 0
	}
	return h.tick <= tick
}

// split cuts n after k tokens (a page boundary): a new node takes the first
// k tokens and n's holders and takes n's place under its parent; n keeps the
// rest as the new node's only child. It returns the new upper node.
//
// Only the shorter half is copied; the longer keeps the old array. That
// bounds a split's cost by half the node (an 8K-token node split near its
// end copies the tail, not 7K tokens), and the unused part of the old array
// (the copied half) is never more than the tokens of the node keeping it.
func (t *Tree) split(n *node, k int) *node {
	p := n.parent
	slot := p.kidSlot(n, t.key(n.tokens[:t.pageSize]))
	u := &node{parent: p, holders: make([]holder, len(n.holders))}
	if k <= len(n.tokens)-k {
		u.tokens, n.tokens = clone(n.tokens[:k]), n.tokens[k:]
	} else {
		u.tokens, n.tokens = n.tokens[:k:k], clone(n.tokens[k:])
	}
	t.splitKeys(u, n, k)
	copy(u.holders, n.holders)
	for _, h := range u.holders {
		t.tenants[h.id()].refs++
	}
	p.kids[slot].n = u // same first page, same slot
	n.parent = u
	u.kids = []kid{{t.key(n.tokens[:t.pageSize]), n}}
	t.nodes++
	return u
}

// removeHolder drops holder i of n, and n itself once nobody holds it. The
// tenant's holding of n's parent may join its frontier: the frontier index
// learns of it.
func (t *Tree) removeHolder(n *node, i int) { t.dropHolder(n, i, true) }

// dropHolder is removeHolder; probe is false where the pair's index entry
// was just popped, so the removal leaves no stale entry to probe for.
func (t *Tree) dropHolder(n *node, i int, probe bool) {
	h := n.holders[i]
	p := n.parent
	last := len(n.holders) - 1
	n.holders[i] = n.holders[last]
	n.holders = n.holders[:last]
	tn := &t.tenants[h.id()]
	tn.refs--
	if tn.live {
		tn.tokens -= len(n.tokens)
		t.tokens -= len(n.tokens)
		if h.confirmed() {
			tn.confirmed -= len(n.tokens)
			t.confirmed -= len(n.tokens)
		}
	}
	t.prune(n)
	if t.idx != nil {
		switch {
		case tn.refs == 0:
			t.idx.reset(h.id())
		case tn.live:
			t.noteFrontier(p, h.id(), probe)
		}
	}
}

// prune deletes n, and then its ancestors, while they are held by nobody and
// have no children.
func (t *Tree) prune(n *node) {
	for n != &t.root && len(n.holders) == 0 && len(n.kids) == 0 {
		p := n.parent
		p.removeKid(p.kidSlot(n, t.key(n.tokens[:t.pageSize])))
		t.nodes--
		t.unique -= len(n.tokens)
		n.tokens, n.keys, n.parent, n.holders = nil, nil, nil, nil
		n = p
	}
}

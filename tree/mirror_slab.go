package tree

// The Mirror's storage: a slab of blocks named by index, and lists linked
// by index.

// block returns the block r names. The pointer is valid until the next
// block is added (the slab may move).
func (m *Mirror) block(r bref) *mirrorBlock { return &m.slab[r] }

// mirrorChunkTokens is the least tokens in a chunk of Mirror.toks (64 KiB):
// large enough that a chunk's allocation is rare, small enough that an
// engine with few blocks does not hold much more than it uses.
const mirrorChunkTokens = 1 << 14

// tokens returns the page of block r.
func (m *Mirror) tokens(r bref) []uint32 {
	c := m.toks[r>>m.chunkShift]
	i := int(r&(1<<m.chunkShift-1)) * m.pageSize
	return c[i : i+m.pageSize : i+m.pageSize]
}

// alloc returns a free slot for a new block, zeroed.
func (m *Mirror) alloc() bref {
	if n := len(m.free); n > 0 {
		r := m.free[n-1]
		m.free = m.free[:n-1]
		return r
	}
	m.slab = append(m.slab, mirrorBlock{})
	r := bref(len(m.slab) - 1)
	for int(r>>m.chunkShift) >= len(m.toks) {
		m.toks = append(m.toks, make([]uint32, m.pageSize<<m.chunkShift))
	}
	return r
}

// release frees block r's slot, unless the queue still names it.
func (m *Mirror) release(r bref) {
	if b := m.block(r); b.queued {
		b.dead = true
		return
	}
	m.slab[r] = mirrorBlock{}
	m.free = append(m.free, r)
}

// link appends block r to the list that *head starts. A list is linked
// by next, and its first block's prev names its last, so appending costs
// no walk; the order is the order blocks came in, which decides how
// PageRuns split (see spread).
func (m *Mirror) link(head *bref, r bref) {
	b := m.block(r)
	b.next = 0
	if *head == 0 {
		b.prev, *head = r, r
		return
	}
	h := m.block(*head)
	last := h.prev
	m.block(last).next = r
	b.prev, h.prev = last, r
}

// unlink takes block r out of the list that *head starts.
func (m *Mirror) unlink(head *bref, r bref) {
	b := m.block(r)
	switch {
	case r == *head:
		*head = b.next
		if b.next != 0 {
			m.block(b.next).prev = b.prev
		}
	case b.next == 0: // the last
		m.block(b.prev).next = 0
		m.block(*head).prev = b.prev
	default:
		m.block(b.prev).next = b.next
		m.block(b.next).prev = b.prev
	}
	b.prev, b.next = 0, 0
}

package tree

// The Mirror's storage: a slab of blocks named by index, lists linked by
// index, and a filter in front of the map of hashes.

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

// lookup returns the block of hash h, 0 if the mirror does not know it.
func (m *Mirror) lookup(h int64) bref {
	if !m.filter.mayHold(h) {
		return 0
	}
	return m.blocks.get(h)
}

// blockFilter counts the mirror's known hashes per bucket, so that most
// lookups of a hash the mirror does not know (every block an engine
// stores is one, and a cache's worth of blocks makes the map's probe a
// cache miss) read one byte of a table a fraction of the map's size
// instead. A bucket's count is never below the known hashes in it: it
// saturates at 255 and then stays (a false "maybe" costs one map probe).
// The table keeps at least filterSpread buckets per known hash, growing
// by recounting the map.
type blockFilter struct {
	counts []uint8
	shift  uint8 // bucket = (h * filterMix) >> shift
}

const (
	filterSpread = 4
	filterMin    = 1 << 10
	// filterMix spreads engines' hashes over the buckets, whatever bits
	// of them vary (Fibonacci hashing).
	filterMix = 0x9e3779b97f4a7c15
)

func (f *blockFilter) bucket(h int64) uint64 { return (uint64(h) * filterMix) >> f.shift }

// mayHold reports whether h may be a known hash: false means it is not.
func (f *blockFilter) mayHold(h int64) bool {
	return len(f.counts) == 0 || f.counts[f.bucket(h)] != 0
}

// add counts h, which was just added to blocks, growing the table if
// blocks outgrew it.
func (f *blockFilter) add(h int64, blocks *blockTable) {
	if blocks.len()*filterSpread > len(f.counts) {
		f.grow(blocks)
		return // the recount included h
	}
	if c := &f.counts[f.bucket(h)]; *c < 255 {
		*c++
	}
}

// remove uncounts h, which was just deleted from the map.
func (f *blockFilter) remove(h int64) {
	if len(f.counts) == 0 {
		return
	}
	if c := &f.counts[f.bucket(h)]; *c < 255 {
		*c--
	}
}

// grow makes the table filterSpread times as many buckets as blocks has
// hashes, twice that after rounding to a power of two at most, and
// recounts them.
func (f *blockFilter) grow(blocks *blockTable) {
	n := filterMin
	bits := uint8(10)
	for n < 2*filterSpread*blocks.len() {
		n, bits = 2*n, bits+1
	}
	f.counts, f.shift = make([]uint8, n), 64-bits
	for h := range blocks.all() {
		if c := &f.counts[f.bucket(h)]; *c < 255 {
			*c++
		}
	}
}

package tree

import (
	"errors"
	"fmt"
	"slices"
)

// Mirror follows one engine's KV events (one per engine and data-parallel
// rank) and turns them into token paths the tree can apply. Engines name
// each cached block (page) with a 64-bit hash chained to its parent's and
// seeded per process, so the router cannot compute them; it learns them:
// a stored block brings its tokens and its parent's hash, and a removal
// names only hashes. The mirror keeps what it learned, bounded by maxBlocks,
// and resolves a block to its path from the root by walking parents.
//
// A block is attached when its chain of parents reaches the root: only then
// is its path known, and only then does the engine's prefix cache let a
// request reuse it. A block whose parent is unknown (the subscription joined
// mid-stream, or the parent was removed while its children stayed) is kept
// detached: it matches nothing and is reported by nothing until its parent
// is stored, when it attaches with everything waiting below it. Store and
// Remove report what joined and left the attached set as PageRuns, which the
// caller applies to the tree: InsertConfirmed(span.Path, worker) for each
// attached PageRun, Trim(span.Path, worker, len(span.Path)-span.Pages*pageSize)
// for each detached one (detached first, when a call returns both).
//
// Detached blocks are bounded apart (LimitDetached): an engine can store
// blocks under parents it never names, which nothing would ever attach or
// remove. Past the limit the blocks detached longest ago are forgotten
// (Evicted counts them); the attached ones, which the index holds, are
// never touched by it.
//
// A Mirror is not safe for concurrent use: the caller serializes its calls
// (a subscription applies its events from one goroutine).
type Mirror struct {
	pageSize  int
	maxBlocks int

	// The blocks live in slab, named by their index there (a bref), and
	// their tokens in toks (see tokens): no block holds a pointer, so the
	// collector does not scan a cache's worth of them on every cycle, and
	// storing a block allocates nothing once the slab has grown. slab[0]
	// is unused, so bref 0 means none. The tokens are kept in chunks of
	// 1<<chunkShift pages that growing never copies: a slice of 512-token
	// pages grown by append copied each page about four times over.
	slab       []mirrorBlock
	toks       [][]uint32
	chunkShift uint8
	free       []bref // slots of removed blocks, ready for reuse

	blocks  blockTable
	adds    uint64         // blocks added since NewMirror: a Ref of an unknown hash holds while it stays
	orphans map[int64]bref // by parent hash: the first of the blocks stored below a block not known

	detached int // blocks in blocks that are not attached
	// copies counts, for each block stored again while the mirror knew
	// it, the stores beyond the first: an engine that does not
	// deduplicate its cache (vLLM computes a page anew for each request
	// that needs it before any copy is cached, and caches each copy
	// under the same hash) stores a hash once per copy and removes it
	// once per copy evicted, so the block stays until its last copy
	// goes. An engine that never holds two copies never stores a known
	// hash again, and this stays empty.
	copies  map[bref]uint32
	unknown int // hashes Remove did not know, since NewMirror

	// maxDetached bounds detached; queue holds, oldest first from qhead,
	// the blocks in the order they were detached (each at most once, while
	// queued), and possibly blocks attached or forgotten since, skipped
	// when reached. evicted counts the blocks forgotten for the bound.
	maxDetached int
	queue       []bref
	qhead       int
	evicted     int

	// chain caches the attached path Store extended last: chain[i] is the
	// block at depth i+1, path their tokens. Engines send a chain one block
	// per event, so the next Store usually extends it by one page instead
	// of walking the parents from the root.
	chain []bref
	path  []uint32
	// left and leftPath are the same for the path of the block Remove
	// found a path for last, cut as its blocks leave: an engine evicting
	// a chain leaf first goes on, in its next batch, from the block above
	// the last it evicted, which then ends left, and its path is not
	// walked up for again.
	left     []bref
	leftPath []uint32

	arena []uint32 // the paths of one call's PageRuns, except the one aliasing path
	dfs   []uint32 // the path of the block a walk below a block is at
	stack []mirrorFrame
	up    []bref   // scratch: blocks between one and the cached chain
	found []bref   // scratch: Store's blocks, by index in its chain
	dups  chainSet // scratch: a chain's hashes, to find a repeat

	// runUp is the parent of the block on top of the last PageRun of the
	// current call, when that PageRun is a run of removed blocks that
	// nothing followed (no descendant PageRuns after it): runAt is its
	// index. A removal of runUp joins that PageRun instead of walking up for
	// a path of its own, so an engine evicting a chain leaf first, one
	// block after another, costs one path per call, not one per block.
	runUp bref
	runAt int
}

// bref names a block by its index in Mirror.slab; 0 is none.
type bref = uint32

// mirrorBlock is one block the engine stored. Its children form a list
// (kid, then each child's next), as do the blocks waiting in
// Mirror.orphans under one unknown parent: linked by index, a block has no
// slice of its own to allocate.
type mirrorBlock struct {
	hash      int64
	parent    int64 // 0 when !hasParent
	depth     int32 // when attached: blocks from the root through this one
	up        bref  // when attached: the parent, 0 under the root
	kid       bref  // the first child
	prev      bref  // the sibling before; the first names the last
	next      bref  // the sibling after
	hasParent bool
	attached  bool
	queued    bool // in Mirror.queue
	// dead: removed while queued; the slot is freed (and may be reused)
	// only once the queue let go of it, so a queued bref never names
	// another block.
	dead bool
}

// mirrorFrame is one step of a walk below a block: the block, where its
// tokens start in dfs, and how many blocks the current PageRun has through it.
type mirrorFrame struct {
	b   bref
	off int
	run int
}

// MirrorBlock is one stored block: the engine's hash and the page's tokens.
type MirrorBlock struct {
	Hash   int64
	Tokens []uint32
}

// PageRun is a run of pages that joined (Store) or left (Remove) the set of
// blocks reachable from the root. PageRuns cover each such block exactly once;
// a run of blocks each the only one joining (or leaving) below the one
// before comes as one PageRun.
//
// Path may share memory with the Mirror: it is valid only until the next
// call on the Mirror, and must not be written to. Copy what you keep.
type PageRun struct {
	// Path is the full token path from the root through the span's last
	// page.
	Path []uint32
	// Pages is how many trailing pages of Path the span covers.
	Pages int
}

var (
	// ErrPageSize: a stored block's token count is not the page size.
	ErrPageSize = errors.New("tree: block size differs from the page size")
	// ErrMirrorFull: the mirror holds maxBlocks blocks; the caller resets
	// (Clear, and ClearTenant on the tree) and follows the engine afresh.
	ErrMirrorFull = errors.New("tree: mirror full")
	// ErrBlockCycle: a stored chain repeats a hash, or names its parent
	// again: a block would be its own ancestor.
	ErrBlockCycle = errors.New("tree: stored chain repeats a block hash")
)

// spanArenaKeep bounds the tokens of PageRun paths a Mirror keeps allocated
// between calls: a removal near the root of a large cache can return far
// more, once.
const spanArenaKeep = 1 << 20

// NewMirror returns an empty mirror for an engine with pageSize tokens per
// block, that holds at most maxBlocks blocks (attached or not). Both come
// from configuration; it panics if either is not positive.
func NewMirror(pageSize, maxBlocks int) *Mirror {
	if pageSize <= 0 || maxBlocks <= 0 {
		panic(fmt.Sprintf("tree: NewMirror(%d, %d): page size and block limit must be positive", pageSize, maxBlocks))
	}
	m := &Mirror{pageSize: pageSize, maxBlocks: maxBlocks, maxDetached: maxBlocks, blocks: newBlockTable()}
	for pageSize<<m.chunkShift < mirrorChunkTokens {
		m.chunkShift++
	}
	m.Clear()
	return m
}

// LimitDetached bounds the detached blocks the mirror keeps to n (at first,
// maxBlocks: no bound of their own). Each Store and Remove that leaves more
// forgets the blocks detached longest ago until n are left, as if the
// engine had removed them; they were reported by no PageRun, so the caller has
// nothing to apply. It panics if n is negative.
func (m *Mirror) LimitDetached(n int) {
	if n < 0 {
		panic(fmt.Sprintf("tree: LimitDetached(%d): the limit must not be negative", n))
	}
	m.maxDetached = n
	m.trimDetached()
}

// Evicted returns how many detached blocks were forgotten for the
// LimitDetached bound, since NewMirror (Clear keeps the count).
func (m *Mirror) Evicted() int { return m.evicted }

// Len returns how many blocks the mirror knows, attached or not.
func (m *Mirror) Len() int { return m.blocks.len() }

// Detached returns how many known blocks are not reachable from the root.
func (m *Mirror) Detached() int { return m.detached }

// Unknown returns how many hashes Remove was asked to remove without
// knowing them, since NewMirror (Clear keeps the count, as a metric would).
// Some are expected after joining mid-stream; a steady stream of them means
// the mirror lost track of the engine.
func (m *Mirror) Unknown() int { return m.unknown }

// Clear forgets every block: the engine cleared its cache, or the caller
// resets after an error or a gap in the events.
func (m *Mirror) Clear() {
	m.blocks = blockTable{key: m.blocks.key, lookups: m.blocks.lookups}
	m.orphans = map[int64]bref{}
	m.slab = make([]mirrorBlock, 1) // slot 0 stays unused: bref 0 is none
	m.toks = nil
	m.free = nil
	m.detached = 0
	m.copies = nil
	clear(m.queue)
	m.queue, m.qhead = m.queue[:0], 0
	m.truncate(0)
	m.left, m.leftPath = m.left[:0], m.leftPath[:0]
	m.arena = nil
}

// Store records a chain of blocks hanging off parent (or off the root when
// !hasParent), each following block off the one before it. It returns the
// PageRuns that became reachable from the root: the chain, if its parent is
// attached, and whatever was waiting below its blocks. A block already known
// with the same parent and tokens is another copy of it (see
// Mirror.copies): it stays until Remove names it once more than it was
// stored again. One known with other content is replaced, as if removed
// first, and what that detached comes back in detached (apply it before
// attached).
//
// A block whose token count is not the page size (ErrPageSize), a chain
// that repeats a hash (ErrBlockCycle), or one that would take the mirror
// past maxBlocks (ErrMirrorFull) fails the call, and nothing of it is
// applied. A chain continuing the last one stored costs O(pageSize) per
// block; otherwise the parents are walked up to the last chain's path.
func (m *Mirror) Store(parent int64, hasParent bool, blocks []MirrorBlock) (attached, detached []PageRun, err error) {
	return m.StoreFound(parent, hasParent, blocks, nil)
}

// StoreFound is Store, where found[i] is what Find said of blocks[i].Hash
// (found may be shorter than blocks, or nil): those blocks are not looked
// up again unless the mirror changed in a way that may have made found
// stale (see Ref).
func (m *Mirror) StoreFound(parent int64, hasParent bool, blocks []MirrorBlock, found []Ref) (attached, detached []PageRun, err error) {
	attached, detached, err = m.store(parent, hasParent, blocks, found)
	m.trimDetached()
	return attached, detached, err
}

func (m *Mirror) store(parent int64, hasParent bool, blocks []MirrorBlock, hints []Ref) (attached, detached []PageRun, err error) {
	m.resetArena()
	if err := m.check(parent, hasParent, blocks, hints); err != nil {
		return nil, nil, err
	}
	if !hasParent {
		parent = 0
	}
	// found[i] is blocks[i]'s block (check looked each up once): the
	// maps are large and their lookups cache misses, so a chain's blocks
	// are looked up once per call, not once per pass.
	found := m.found
	defer clear(found) // keep no removed block alive
	// Replacements first, so that the rest only attaches. The parent is
	// not in the chain (check), so they leave it as it is.
	prev, prevHas := parent, hasParent
	for i, b := range blocks {
		if r := found[i]; r != 0 {
			if e := m.block(r); e.hasParent != prevHas || e.parent != prev || !equal(m.tokens(r), b.Tokens) {
				detached = m.remove(r, 0, detached)
				found[i] = 0
			} else {
				if m.copies == nil {
					m.copies = map[bref]uint32{}
				}
				m.copies[r]++
			}
		}
		prev, prevHas = b.Hash, true
	}
	var up bref // the parent's block, 0 for the root or an unknown parent
	if hasParent {
		up = m.blocks.get(parent)
	}
	// first is the first block of the chain that is not attached (a new
	// block is not), above the block it hangs off: the chain attaches when
	// that is the root or an attached block. Blocks added to a chain that
	// attaches in this call skip the detached queue: an engine's chains
	// usually do, and queueing every block stored only for the queue's
	// compaction to drop it cost a slice entry (and a pointer for the
	// collector to scan) per block.
	first := slices.IndexFunc(found, func(r bref) bool { return r == 0 || !m.block(r).attached })
	if first < 0 {
		return nil, detached, nil
	}
	above := up
	if first > 0 {
		above = found[first-1]
	}
	attaches := !hasParent || (above != 0 && m.block(above).attached)
	prev, prevHas = parent, hasParent
	for i, b := range blocks {
		r := found[i]
		if r == 0 {
			r = m.add(b, prev, prevHas, up, !attaches)
			found[i] = r
		}
		prev, prevHas, up = b.Hash, true, r
	}
	if !attaches {
		return nil, detached, nil // the chain waits for its parent
	}
	// Attach the chain along the cached path, then what waited below it.
	m.cacheTo(above)
	for _, r := range found[first:] {
		m.attach(r, above)
		m.chain = append(m.chain, r)
		m.path = append(m.path, m.tokens(r)...)
		above = r
	}
	attached = append(attached, PageRun{Path: m.path[:len(m.path):len(m.path)], Pages: len(blocks) - first})
	for _, r := range found[first:] {
		attached = m.spread(r, m.path[:int(m.block(r).depth)*m.pageSize], true, attached)
	}
	return attached, detached, nil
}

// Remove forgets the blocks named by hashes (for a block stored again
// while known, a copy of it: see Mirror.copies) and returns the PageRuns
// that left the reachable set: for each attached block removed, a PageRun of one page for
// it, then PageRuns for its attached descendants, which stay known but
// detached (an engine may store the parent again with the same hash while
// the children stayed). Unknown hashes are ignored and counted (Unknown).
// A block named right after its only departing child (a chain evicted leaf
// first, as LRU engines do) joins that child's PageRun rather than starting
// one, so such a chain costs one path however long it is. The cost is the
// depths of the blocks that start a PageRun plus their descendants' paths.
func (m *Mirror) Remove(hashes []int64) (detached []PageRun) {
	m.resetArena()
	m.blocks.touch(hashes)
	for _, h := range hashes {
		r, slot := m.blocks.find(h)
		detached = m.removeFound(r, slot, detached)
	}
	m.trimDetached()
	return detached
}

// RemoveFound is Remove of the hashes Find was asked for: each block is
// taken from its Ref, not looked up again, unless the Ref went stale (see
// Ref).
func (m *Mirror) RemoveFound(found []Ref) (detached []PageRun) {
	m.resetArena()
	for _, f := range found {
		r, slot := m.resolve(f)
		detached = m.removeFound(r, slot, detached)
	}
	m.trimDetached()
	return detached
}

// removeFound removes block r, held in slot of the table, or counts an
// unknown hash when r is 0.
func (m *Mirror) removeFound(r bref, slot uint32, detached []PageRun) []PageRun {
	if r == 0 {
		m.unknown++
		return detached
	}
	if n, ok := m.copies[r]; ok {
		// One copy of several evicted: the engine still holds another.
		if n > 1 {
			m.copies[r] = n - 1
		} else {
			delete(m.copies, r)
		}
		return detached
	}
	return m.remove(r, slot, detached)
}

// trimDetached forgets the blocks detached longest ago while more than
// maxDetached are. A detached block is in no PageRun and on no cached chain,
// so forgetting it changes nothing a caller holds.
func (m *Mirror) trimDetached() {
	for m.detached > m.maxDetached && m.qhead < len(m.queue) {
		r := m.queue[m.qhead]
		m.queue[m.qhead] = 0
		m.qhead++
		e := m.block(r)
		e.queued = false
		if e.dead {
			m.release(r) // forgotten since it was queued
			continue
		}
		if e.attached {
			continue
		}
		m.remove(r, 0, nil)
		m.evicted++
	}
	m.compactQueue()
}

// enqueue records that block r was just detached.
func (m *Mirror) enqueue(r bref) {
	if e := m.block(r); !e.queued {
		e.queued = true
		m.queue = append(m.queue, r)
	}
}

// compactQueue keeps the queue's length within a constant factor of the
// blocks known: entries of blocks forgotten since are dropped, and the
// consumed head is reclaimed.
func (m *Mirror) compactQueue() {
	live := len(m.queue) - m.qhead
	if m.qhead > live && m.qhead > 64 {
		n := copy(m.queue, m.queue[m.qhead:])
		clear(m.queue[n:])
		m.queue, m.qhead = m.queue[:n], 0
	}
	if live <= 2*m.blocks.len()+64 {
		return
	}
	kept := m.queue[:m.qhead]
	for _, r := range m.queue[m.qhead:] {
		if e := m.block(r); !e.dead {
			kept = append(kept, r)
		} else {
			e.queued = false
			m.release(r)
		}
	}
	clear(m.queue[len(kept):])
	m.queue = kept
}

// resetArena starts a call: PageRuns of earlier calls are invalid from here.
func (m *Mirror) resetArena() {
	if cap(m.arena) > spanArenaKeep {
		m.arena = nil
	}
	m.arena = m.arena[:0]
	m.runUp = 0
}

// add records a new block, detached, below up, the parent's block (0
// when the parent is the root or not known), and returns it. Blocks that
// waited for its hash become its children. queue says whether it joins
// the detached queue: false when the caller attaches it before returning.
func (m *Mirror) add(b MirrorBlock, parent int64, hasParent bool, up bref, queue bool) bref {
	r := m.alloc()
	e := m.block(r)
	*e = mirrorBlock{hash: b.Hash, parent: parent, hasParent: hasParent}
	copy(m.tokens(r), b.Tokens)
	m.blocks.put(b.Hash, r)
	m.adds++
	m.detached++
	if queue {
		m.enqueue(r)
	}
	if len(m.orphans) > 0 {
		if l, ok := m.orphans[b.Hash]; ok {
			e.kid = l
			delete(m.orphans, b.Hash)
		}
	}
	switch {
	case up != 0:
		m.link(&m.block(up).kid, r)
	case hasParent:
		l := m.orphans[parent]
		m.link(&l, r)
		m.orphans[parent] = l
	}
	return r
}

// remove forgets block r, appending the PageRuns that left the reachable
// set. slot is where the block table likely holds r (a slot find
// returned), or 0 for none known.
func (m *Mirror) remove(r bref, slot uint32, spans []PageRun) []PageRun {
	if e := m.block(r); e.attached {
		var path []uint32
		if m.runUp == r && m.runAt == len(spans)-1 {
			// r's child left last, alone: r tops its PageRun now, and
			// r's path is that PageRun's path up to r.
			s := &spans[m.runAt]
			s.Pages++
			path = s.Path[:len(s.Path)-(s.Pages-1)*m.pageSize]
		} else {
			path = m.pathOf(r)
			spans = append(spans, PageRun{Path: path, Pages: 1})
		}
		n := len(spans)
		spans = m.spread(r, path, false, spans)
		m.runUp, m.runAt = 0, 0
		if len(spans) == n {
			m.runUp, m.runAt = m.block(r).up, n-1
		}
		m.uncache(r)
	} else {
		m.detached--
	}
	e := m.block(r)
	if e.hasParent {
		up := e.up
		if up == 0 {
			up = m.blocks.get(e.parent)
		}
		if up != 0 {
			m.unlink(&m.block(up).kid, r)
		} else {
			l := m.orphans[e.parent]
			m.unlink(&l, r)
			if l == 0 {
				delete(m.orphans, e.parent)
			} else {
				m.orphans[e.parent] = l
			}
		}
	}
	if e.kid != 0 {
		// They stay known, waiting for e's hash to be stored again.
		m.orphans[e.hash] = e.kid
		e.kid = 0
	}
	m.blocks.del(e.hash, slot)
	if len(m.copies) > 0 {
		delete(m.copies, r)
	}
	m.release(r)
	return spans
}

func (m *Mirror) attach(r, up bref) {
	e := m.block(r)
	e.attached, e.up, e.depth = true, up, 1
	if up != 0 {
		e.depth = m.block(up).depth + 1
	}
	m.detached--
}

func (m *Mirror) detach(r bref) {
	e := m.block(r)
	e.attached, e.up, e.depth = false, 0, 0
	m.detached++
	m.enqueue(r)
}

// spread attaches (or detaches) the blocks below from that are not (or
// are) attached, from's path being base, and appends a PageRun for each run
// down to a leaf of what changed. It walks with an explicit stack: the
// engine decides how deep chains go.
func (m *Mirror) spread(from bref, base []uint32, attach bool, spans []PageRun) []PageRun {
	m.stack = m.stack[:0]
	push := func(parent bref, off int) int {
		pushed := 0
		for c := m.block(parent).kid; c != 0; c = m.block(c).next {
			if m.block(c).attached == attach {
				continue
			}
			if attach {
				m.attach(c, parent)
			} else {
				m.detach(c)
			}
			m.stack = append(m.stack, mirrorFrame{b: c, off: off, run: 1})
			pushed++
		}
		return pushed
	}
	if push(from, len(base)) == 0 {
		return spans // the usual case: copying base would cost O(depth)
	}
	m.dfs = append(m.dfs[:0], base...)
	for len(m.stack) > 0 {
		f := m.stack[len(m.stack)-1]
		m.stack = m.stack[:len(m.stack)-1]
		m.dfs = append(m.dfs[:f.off], m.tokens(f.b)...)
		if push(f.b, len(m.dfs)) > 0 {
			// The child walked next continues this run.
			m.stack[len(m.stack)-1].run = f.run + 1
			continue
		}
		start := len(m.arena)
		m.arena = append(m.arena, m.dfs...)
		spans = append(spans, PageRun{Path: m.arena[start:len(m.arena):len(m.arena)], Pages: f.run})
	}
	return spans
}

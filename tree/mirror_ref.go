package tree

// Ref is what Find learned of a hash: the block it names, if the mirror
// knows it, and where the block table holds it. A caller that looks at a
// block before storing or removing it (the policy asks whether a removal
// commutes with the chain it gathers) hands the Ref on to StoreFound or
// RemoveFound, so that each block of an event is looked up once: the table
// is a cache's worth of blocks, and each lookup of one not looked up lately
// is a cache miss.
//
// A Ref is checked where it is used, not trusted: a block is taken from
// its slot only if the slot still holds its hash, and "unknown" only if no
// block was added since Find. One made stale by a change to the mirror
// costs a lookup again, never a wrong answer.
type Ref struct {
	hash int64
	r    bref
	slot uint32
	adds uint64 // Mirror.adds at Find
}

// Hash is the hash Find was asked for.
func (f Ref) Hash() int64 { return f.hash }

// Known reports whether the mirror knew the block when Find ran.
func (f Ref) Known() bool { return f.r != 0 }

// Find looks block h up.
func (m *Mirror) Find(h int64) Ref {
	r, slot := m.blocks.find(h)
	return Ref{hash: h, r: r, slot: slot, adds: m.adds}
}

// Known reports whether the mirror knows block h, attached or not.
func (m *Mirror) Known(h int64) bool { return m.Find(h).Known() }

// resolve returns f's block and its slot now (0 when not known): from f
// when it still holds, else looked up again.
func (m *Mirror) resolve(f Ref) (bref, uint32) {
	if r := m.blocks.at(f.slot, f.hash); r != 0 {
		return r, f.slot
	}
	if f.r == 0 && f.adds == m.adds {
		return 0, 0 // nothing added since: still unknown
	}
	return m.blocks.find(f.hash)
}

// Lookups returns how many times the mirror probed its block table for a
// hash, since NewMirror (Clear keeps the count): the cost a benchmark
// counts per event, and a test bounds.
func (m *Mirror) Lookups() int { return m.blocks.lookups }

// Prefetch reads the table's cache lines where a lookup of h starts, and
// nothing else: a caller about to look up many hashes one after another,
// each lookup waiting on work that depends on the one before, prefetches
// them all first, so that their cache misses overlap (the loads depend on
// no other) and the lookups proper find the slots cached.
func (m *Mirror) Prefetch(h int64) { m.blocks.prefetch(h) }

package tree

import (
	"iter"
	"math/rand/v2"
)

// blockTable maps an engine's block hash to its block in a Mirror. A full
// engine stores a block and removes one for every page it admits, so the
// table sees an insert and a delete per page, forever; a Go map churned that
// way fills with deleted-slot markers that every probe then walks over
// (BenchmarkBlockTableChurn: several times the cost of a fresh map's). This
// one is open-addressed with linear probing and deletes by shifting the
// entries after the hole back, so no marker is ever left: a probe stops at
// the first empty slot. Homes mix the engine's hash with a random key the
// table draws at birth, so an engine, which never learns the key, cannot
// choose hashes that pile up in one run.
type blockTable struct {
	slots []blockSlot // a power of two long, or empty
	n     int
	shift uint8 // home = hash >> shift
	key   uint64
	// touched keeps the first passes of getAll and touch from being
	// optimized away.
	touched bref
	// lookups counts the probes (finds) since the table was made; Clear
	// keeps it (see Mirror.Lookups).
	lookups int
}

// blockSlot is one entry; ref 0 marks it empty (bref 0 is no block).
type blockSlot struct {
	hash int64
	ref  bref
}

const (
	// blockTableMin is the slots of a table's first allocation.
	blockTableMin = 1 << 10
	// A table grows (doubles) past 3/4 full: linear probing stays short
	// up to there, and the table costs at most 16/0.375 bytes a block.
	blockTableLoadNum, blockTableLoadDen = 3, 4
)

func newBlockTable() blockTable { return blockTable{key: rand.Uint64()} }

// len returns how many hashes the table holds.
func (t *blockTable) len() int { return t.n }

// home is the slot where h's probe starts: the top bits of the keyed hash
// through a 64-bit finalizer (every input bit moves every output bit), a
// few nanoseconds where hash/maphash.Comparable costs tens for an int64.
func (t *blockTable) home(h int64) uint64 {
	x := uint64(h) ^ t.key
	x = (x ^ x>>33) * 0xff51afd7ed558ccd
	x = (x ^ x>>33) * 0xc4ceb9fe1a85ec53
	return (x ^ x>>33) >> t.shift
}

// get returns the block of hash h, 0 when the table does not hold it.
func (t *blockTable) get(h int64) bref {
	r, _ := t.find(h)
	return r
}

// find returns the block of hash h and the slot that holds it (0, 0 when
// the table does not hold it). Every probe of the table is a find, and
// counts in lookups.
func (t *blockTable) find(h int64) (bref, uint32) {
	t.lookups++
	if t.n == 0 {
		return 0, 0
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.home(h); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.ref == 0 {
			return 0, 0
		}
		if s.hash == h {
			return s.ref, uint32(i)
		}
	}
}

// at returns the block in slot i if that slot holds hash h, else 0. A
// slot find returned may no longer hold h (a delete shifts entries back, a
// growth refiles them all), but a slot that holds h holds h's only entry:
// so a slot checked this way needs no probe.
func (t *blockTable) at(i uint32, h int64) bref {
	if int(i) >= len(t.slots) {
		return 0
	}
	if s := &t.slots[i]; s.ref != 0 && s.hash == h {
		return s.ref
	}
	return 0
}

// getAll sets out[i] to the block of blocks[i]'s hash (0 when not held).
// A table of a cache's worth of blocks is far larger than the processor's
// caches, so each lookup is a miss; a first pass reads every home slot
// with no load depending on another, so that the misses overlap instead of
// following one another, and the lookups proper then find them cached.
func (t *blockTable) getAll(blocks []MirrorBlock, out []bref) {
	if t.n == 0 {
		clear(out)
		return
	}
	var any bref
	for _, b := range blocks {
		any |= t.slots[t.home(b.Hash)].ref
	}
	t.touched |= any
	for i, b := range blocks {
		out[i] = t.get(b.Hash)
	}
}

// touch reads the home slot of each of hs, with no load depending on
// another (see getAll), for the lookups that follow to find them cached.
func (t *blockTable) touch(hs []int64) {
	if t.n == 0 {
		return
	}
	var any bref
	for _, h := range hs {
		any |= t.slots[t.home(h)].ref
	}
	t.touched |= any
}

// prefetch reads the cache line of h's home slot and the line after it
// (see Mirror.Prefetch). A probe goes on from home until it finds h or an
// empty slot, an insert to the first empty slot, and a delete shifts back
// the run after h's slot: one slot in four is the last of its line (a slot
// is 16 bytes), so each of them often reads the next line too. With both
// lines read ahead, applying a full engine's events for a 1K-token prompt
// took 2 points less of the router's CPU (14.0-15.2% against 16.0-17.1%,
// two pairs of profiles, BENCHMARKS "The mirror's table read a line
// ahead").
func (t *blockTable) prefetch(h int64) {
	if t.n != 0 {
		i, mask := t.home(h), uint64(len(t.slots)-1)
		t.touched |= t.slots[i].ref | t.slots[((i|3)+1)&mask].ref
	}
}

// put files block r (not 0) under hash h, replacing what h named.
func (t *blockTable) put(h int64, r bref) {
	if (t.n+1)*blockTableLoadDen > len(t.slots)*blockTableLoadNum {
		t.grow()
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.home(h); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.ref == 0 {
			s.hash, s.ref = h, r
			t.n++
			return
		}
		if s.hash == h {
			s.ref = r
			return
		}
	}
}

// del removes hash h, if held; slot is where h is likely held (a slot
// find returned), checked before any probe.
func (t *blockTable) del(h int64, slot uint32) {
	if t.at(slot, h) == 0 {
		var r bref
		if r, slot = t.find(h); r == 0 {
			return
		}
	}
	t.delAt(uint64(slot))
}

// delAt empties slot i, moving back each entry after it in its run whose
// home is not between the hole and the entry's slot: every hash stays
// reachable from its home without crossing an empty slot.
func (t *blockTable) delAt(i uint64) {
	t.n--
	mask := uint64(len(t.slots) - 1)
	for j := (i + 1) & mask; t.slots[j].ref != 0; j = (j + 1) & mask {
		// The entry at j may fill the hole at i when its home is not in
		// (i, j], cyclically: it is at least j-i slots from home.
		if d := t.home(t.slots[j].hash); (j-d)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = blockSlot{}
}

// grow doubles the slots (or makes the first ones) and refiles every entry.
func (t *blockTable) grow() {
	old := t.slots
	n, bits := blockTableMin, uint8(10)
	for n < 2*len(old) {
		n, bits = 2*n, bits+1
	}
	t.slots, t.shift = make([]blockSlot, n), 64-bits
	mask := uint64(n - 1)
	for _, s := range old {
		if s.ref == 0 {
			continue
		}
		i := t.home(s.hash)
		for t.slots[i].ref != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// all yields every hash held and its block, in no particular order. The
// table must not change during the walk.
func (t *blockTable) all() iter.Seq2[int64, bref] {
	return func(yield func(int64, bref) bool) {
		for _, s := range t.slots {
			if s.ref != 0 && !yield(s.hash, s.ref) {
				return
			}
		}
	}
}

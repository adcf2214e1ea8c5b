package tree

import (
	"fmt"
	"slices"
)

// check validates a Store before anything is applied, and fills m.found
// with each block's block (0: new to the mirror): from hints, what Find
// said of the first blocks, and by lookups for the rest.
func (m *Mirror) check(parent int64, hasParent bool, blocks []MirrorBlock, hints []Ref) error {
	for i, b := range blocks {
		if len(b.Tokens) != m.pageSize {
			return fmt.Errorf("%w: block %d of %d (hash %d) has %d tokens, the page size is %d",
				ErrPageSize, i+1, len(blocks), b.Hash, len(b.Tokens), m.pageSize)
		}
	}
	if h, dup := m.repeat(parent, hasParent, blocks); dup {
		return fmt.Errorf("%w: hash %d", ErrBlockCycle, h)
	}
	m.found = slices.Grow(m.found[:0], len(blocks))[:len(blocks)]
	n := 0
	for ; n < min(len(hints), len(blocks)) && hints[n].hash == blocks[n].Hash; n++ {
		m.found[n], _ = m.resolve(hints[n])
	}
	m.blocks.getAll(blocks[n:], m.found[n:])
	fresh := 0
	for _, r := range m.found {
		if r == 0 {
			fresh++
		}
	}
	if m.blocks.len()+fresh > m.maxBlocks {
		clear(m.found)
		return fmt.Errorf("%w: %d blocks known, %d more would pass the limit of %d",
			ErrMirrorFull, m.blocks.len(), fresh, m.maxBlocks)
	}
	return nil
}

// repeat returns the first hash of blocks, in order, that repeats the
// parent's (when hasParent) or an earlier block's. It files the hashes in
// order in a scratch set (see chainSet), so the first already there is the
// answer: one pass, where sorting a copy of a chain's hashes cost
// O(n log n) and a Go map filled and cleared for every chain cost more
// than the rest of the check.
func (m *Mirror) repeat(parent int64, hasParent bool, blocks []MirrorBlock) (int64, bool) {
	if len(blocks)+b2i(hasParent) < 2 {
		return 0, false
	}
	s := &m.dups
	s.reset(len(blocks)+1, m.blocks.key)
	if hasParent {
		s.add(parent)
	}
	for _, b := range blocks {
		if !s.add(b.Hash) {
			return b.Hash, true
		}
	}
	return 0, false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// chainSet is a set of the hashes of one chain, reused from chain to chain:
// open addressing with linear probing, at most half full, each slot stamped
// with the chain it was filed for, so starting a chain clears nothing. Homes
// mix the hash with the mirror's random key, as the block table's do, so an
// engine cannot pick hashes that pile up in one run.
type chainSet struct {
	slots []chainSlot
	gen   uint32
	shift uint8
	key   uint64
}

type chainSlot struct {
	hash int64
	gen  uint32 // the chain it belongs to; other values mark it empty
}

// chainSetKeep bounds the slots a chainSet keeps between chains (1 MiB):
// an engine's longest chains come once.
const chainSetKeep = 1 << 16

// reset empties the set for a chain of up to n hashes.
func (s *chainSet) reset(n int, key uint64) {
	size, bits := 16, uint8(4)
	for size < 2*n {
		size, bits = 2*size, bits+1
	}
	if len(s.slots) > max(size, chainSetKeep) || len(s.slots) < size {
		s.slots, s.gen = make([]chainSlot, size), 0
	}
	if len(s.slots) > size {
		// Keep the larger slots: the stamps of other chains still mark
		// them empty.
		for size < len(s.slots) {
			size, bits = 2*size, bits+1
		}
	}
	s.shift, s.key = 64-bits, key
	if s.gen++; s.gen == 0 { // wrapped: old stamps could match again
		clear(s.slots)
		s.gen = 1
	}
}

// add files h, and reports false if it was there already.
func (s *chainSet) add(h int64) bool {
	x := uint64(h) ^ s.key
	x = (x ^ x>>33) * 0xff51afd7ed558ccd
	x = (x ^ x>>33) * 0xc4ceb9fe1a85ec53
	mask := uint64(len(s.slots) - 1)
	for i := (x ^ x>>33) >> s.shift; ; i = (i + 1) & mask {
		c := &s.slots[i]
		if c.gen != s.gen {
			c.hash, c.gen = h, s.gen
			return true
		}
		if c.hash == h {
			return false
		}
	}
}

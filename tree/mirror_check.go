package tree

import (
	"fmt"
	"slices"
)

// check validates a Store before anything is applied, and fills m.found
// with each block's block (0: new to the mirror).
func (m *Mirror) check(parent int64, hasParent bool, blocks []MirrorBlock) error {
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
	m.blocks.getAll(blocks, m.found)
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
// parent's (when hasParent) or an earlier block's. It sorts a copy of the
// hashes to learn whether there is one at all (a Go map filled and cleared
// for every chain cost more than the rest of the check), and walks them in
// order only when there is.
func (m *Mirror) repeat(parent int64, hasParent bool, blocks []MirrorBlock) (int64, bool) {
	hs := m.dups[:0]
	if hasParent {
		hs = append(hs, parent)
	}
	for _, b := range blocks {
		hs = append(hs, b.Hash)
	}
	m.dups = hs
	if len(hs) < 2 {
		return 0, false
	}
	slices.Sort(hs)
	some := false
	for i := 1; i < len(hs) && !some; i++ {
		some = hs[i] == hs[i-1]
	}
	if !some {
		return 0, false
	}
	for i, b := range blocks {
		if hasParent && b.Hash == parent {
			return b.Hash, true
		}
		for _, e := range blocks[:i] {
			if e.Hash == b.Hash {
				return b.Hash, true
			}
		}
	}
	return 0, false // not reached: the sort found a repeat
}

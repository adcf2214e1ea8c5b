package tree

// LeafAfter reports whether block f (see Find) is known and would be a
// leaf once the blocks named in gone are removed: every block stored below h is in gone.
// Removing such a block detaches nothing but itself, so it commutes with
// storing blocks that are not h and do not hang below it; the caller uses
// that to apply an engine's evictions before the new chain they were
// interleaved with. gone is searched from its end, where an engine evicting
// a chain leaf first has just named h's child; a block with more children
// than leafAfterScan, or children further back, or a child the engine
// holds more than one copy of (one removal leaves it), is reported as no
// leaf.
func (m *Mirror) LeafAfter(f Ref, gone []Ref) bool {
	r, _ := m.resolve(f)
	if r == 0 {
		return false
	}
	tail := gone[max(0, len(gone)-leafAfterScan):]
	n := 0
next:
	for k := m.block(r).kid; k != 0; k = m.block(k).next {
		if n++; n > leafAfterScan {
			return false
		}
		if _, ok := m.copies[k]; ok {
			return false
		}
		for i := len(tail) - 1; i >= 0; i-- {
			if tail[i].hash == m.block(k).hash {
				continue next
			}
		}
		return false
	}
	return true
}

// leafAfterScan bounds the work of LeafAfter: the children it checks and
// how far back in gone it looks for each.
const leafAfterScan = 8

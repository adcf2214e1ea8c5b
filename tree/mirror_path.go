package tree

// The Mirror's cached paths: the chain Store extended last (chain, path)
// and the path Remove found last (left, leftPath). A block's path is its
// ancestors' tokens, which a removal must hand to the caller as a PageRun;
// walking parents up to the root for it is a cache miss per block, so each
// walk stops at the deepest ancestor on either cached path.

// onPath reports whether attached block r is on the path of blocks p
// (p[i] at depth i+1).
func (m *Mirror) onPath(p []bref, r bref) bool {
	d := int(m.block(r).depth)
	return d <= len(p) && p[d-1] == r
}

// cached reports whether attached block r is on the cached chain.
func (m *Mirror) cached(r bref) bool { return m.onPath(m.chain, r) }

// truncate cuts the cached chain to its first d blocks.
func (m *Mirror) truncate(d int) {
	m.chain = m.chain[:d]
	m.path = m.path[:d*m.pageSize]
}

// uncache cuts the cached paths above attached block r, which is leaving.
func (m *Mirror) uncache(r bref) {
	d := int(m.block(r).depth)
	if m.cached(r) {
		m.truncate(d - 1)
	}
	if m.onPath(m.left, r) {
		m.left, m.leftPath = m.left[:d-1], m.leftPath[:(d-1)*m.pageSize]
	}
}

// climb collects in m.up the blocks from r up to, not including, its
// deepest ancestor on the cached chain (or, with left, on either cached
// path), and returns that ancestor's depth (0: none, the path starts at the
// root) and whether it was found on the path left.
func (m *Mirror) climb(r bref, left bool) (d int, onLeft bool) {
	m.up = m.up[:0]
	for ; r != 0; r = m.block(r).up {
		switch {
		case m.cached(r):
			return int(m.block(r).depth), false
		case left && m.onPath(m.left, r):
			return int(m.block(r).depth), true
		}
		m.up = append(m.up, r)
	}
	return 0, false
}

// cacheTo makes the cached chain end at attached block r (0: the root).
func (m *Mirror) cacheTo(r bref) {
	d, _ := m.climb(r, false)
	m.truncate(d)
	for i := len(m.up) - 1; i >= 0; i-- {
		m.chain = append(m.chain, m.up[i])
		m.path = append(m.path, m.tokens(m.up[i])...)
	}
}

// pathOf returns attached block r's path in the arena, leaving the cached
// chain as it is (PageRuns returned earlier in the call may alias it), and
// makes it the path left.
func (m *Mirror) pathOf(r bref) []uint32 {
	ps := m.pageSize
	start := len(m.arena)
	d, onLeft := m.climb(r, true)
	if !onLeft {
		m.left = append(m.left[:0], m.chain[:d]...)
		m.leftPath = append(m.leftPath[:0], m.path[:d*ps]...)
	}
	m.left, m.leftPath = m.left[:d], m.leftPath[:d*ps]
	for i := len(m.up) - 1; i >= 0; i-- {
		m.left = append(m.left, m.up[i])
		m.leftPath = append(m.leftPath, m.tokens(m.up[i])...)
	}
	m.arena = append(m.arena, m.leftPath...)
	return m.arena[start:len(m.arena):len(m.arena)]
}

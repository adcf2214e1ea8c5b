package tree

import "slices"

// Stats describes the tree's size.
type Stats struct {
	// Nodes is the number of nodes, the root excluded.
	Nodes int
	// Tokens is the stored tokens the budget counts: each node's tokens once
	// per tenant holding it, the sum of TenantTokens.
	Tokens int
	// UniqueTokens is the tokens in the tree counting each node once: what
	// the tree's memory grows with. UniqueTokens <= Tokens.
	UniqueTokens int
	// TenantTokens is each live tenant's stored tokens.
	TenantTokens map[string]int
	// MaxTokens is the budget (Config.MaxTokens; 0: unbounded).
	MaxTokens int
	// ConfirmedTokens is the part of Tokens held confirmed (by KV events);
	// TenantConfirmed splits it by tenant, with an entry for every tenant
	// in TenantTokens.
	ConfirmedTokens int
	TenantConfirmed map[string]int
}

// Stats returns the tree's counters; it does not walk the tree.
func (t *Tree) Stats() Stats {
	t.mu.RLock()
	defer t.mu.RUnlock()
	s := Stats{
		Nodes: t.nodes, Tokens: t.tokens, UniqueTokens: t.unique, ConfirmedTokens: t.confirmed,
		MaxTokens:       t.maxTokens,
		TenantTokens:    make(map[string]int, len(t.ids)),
		TenantConfirmed: make(map[string]int, len(t.ids)),
	}
	for name, id := range t.ids {
		s.TenantTokens[name] = t.tenants[id].tokens
		s.TenantConfirmed[name] = t.tenants[id].confirmed
	}
	return s
}

// TenantTokens returns the stored tokens tenant holds, 0 if none. It reads a
// counter the tree maintains, so a policy may call it per request.
func (t *Tree) TenantTokens(tenant string) int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if id, ok := t.ids[tenant]; ok {
		return t.tenants[id].tokens
	}
	return 0
}

// Walk calls fn for each live tenant's leaf paths: every path from the root
// to a node the tenant holds where no child is held by it. Together they say
// exactly what each tenant holds (its holdings are the prefixes of these
// paths). path is reused between calls; fn must copy what it keeps and must
// not call the tree. Walk holds the read lock throughout: it is for tests,
// debugging and snapshots, not for the routing path.
func (t *Tree) Walk(fn func(tenant string, path []uint32)) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var path []uint32
	var walk func(n *node)
	walk = func(n *node) {
		path = append(path, n.tokens...)
		for _, h := range n.holders {
			if t.tenants[h.id()].live && n.leafFor(h.id()) {
				fn(t.tenants[h.id()].name, path)
			}
		}
		for _, k := range n.kids {
			walk(k.n)
		}
		path = path[:len(path)-len(n.tokens)]
	}
	walk(&t.root)
}

// Holdings returns every page tenant holds (only the confirmed ones if
// confirmedOnly), each as its full token path from the root, sorted: a
// tenant holding the 3-page prompt abc returns [a], [a b], [a b c]. It is
// for tests and debugging, so that a tenant's confirmed holdings can be
// compared page for page with what its engine caches; it holds the read lock
// throughout and allocates the tenant's leaf paths (the paths of a leaf's
// pages share one array; treat them as read-only).
func (t *Tree) Holdings(tenant string, confirmedOnly bool) [][]uint32 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	id, ok := t.ids[tenant]
	if !ok {
		return nil
	}
	holds := func(n *node) bool {
		i := n.holderIndex(id)
		return i >= 0 && (!confirmedOnly || n.holders[i].confirmed())
	}
	// Depth first with an explicit stack (prompts set the depth). pending
	// counts the path's nodes whose pages are not out yet; the next leaf
	// copies the path once and hands them out as prefixes of that copy.
	type frame struct {
		n     *node
		depth int // nodes above n on the path
	}
	var out [][]uint32
	var path []uint32
	var ends []int // by depth: where each path node's tokens end in path
	pending := 0
	stack := []frame{{&t.root, -1}}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		start := 0
		if f.depth > 0 {
			start = ends[f.depth-1]
		}
		if f.depth >= 0 {
			ends = append(ends[:f.depth], start+len(f.n.tokens))
			path = append(path[:start], f.n.tokens...)
			pending = min(pending, f.depth) + 1
		}
		leaf := true
		for _, k := range f.n.kids {
			if holds(k.n) {
				stack = append(stack, frame{k.n, f.depth + 1})
				leaf = false
			}
		}
		if !leaf || f.depth < 0 {
			continue
		}
		cp := slices.Clone(path)
		first := 0
		if d := f.depth + 1 - pending; d > 0 {
			first = ends[d-1]
		}
		for end := first + t.pageSize; end <= len(cp); end += t.pageSize {
			out = append(out, cp[:end:end])
		}
		pending = 0
	}
	slices.SortFunc(out, slices.Compare)
	return out
}

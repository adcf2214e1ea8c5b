package tree

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
}

// Stats returns the tree's counters; it does not walk the tree.
func (t *Tree) Stats() Stats {
	t.mu.RLock()
	defer t.mu.RUnlock()
	s := Stats{Nodes: t.nodes, Tokens: t.tokens, UniqueTokens: t.unique, TenantTokens: make(map[string]int, len(t.ids))}
	for name, id := range t.ids {
		s.TenantTokens[name] = t.tenants[id].tokens
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
			if t.tenants[h.tenant].live && n.leafFor(h.tenant) {
				fn(t.tenants[h.tenant].name, path)
			}
		}
		for _, k := range n.kids {
			walk(k.n)
		}
		path = path[:len(path)-len(n.tokens)]
	}
	walk(&t.root)
}

package tree

// A tenant's limit is its engine's KV capacity: the engine cannot hold more,
// so the tree never credits a worker with more than that, whatever room the
// global budget has left. It holds after every insert, as the budget does:
// an insert that takes the tenant over its limit evicts that tenant's
// holdings, in the tree's eviction order, until it is within the limit
// again, before it releases the write lock.
//
// Speculative holdings go first, then confirmed ones, each in the tree's
// eviction order. Confirmed holdings mirror the engine, which cannot hold
// more than its capacity, so with events flowing they never exceed the
// limit on their own: what takes a tenant over is speculation. Evicting a
// confirmed page the engine still holds would make the tree wrong until the
// page is stored again; when the engine does make room for the speculated
// prompt, its removal events say which pages went. For a tenant without
// events every holding is speculative, and the order is the plain one.
//
// Cost: the tenant's heap in the frontier index (frontier.go) gives its
// frontier in order, so an insert's eviction costs what it evicts, about
// what the insert added. Lowering a limit under what a tenant holds evicts
// the difference at once.

// SetTenantLimit caps the stored tokens tenant may hold; maxTokens <= 0
// removes the cap. The setting is kept by name: it applies to a tenant not
// in the tree yet, and survives ClearTenant; RemoveTenant drops it. If the
// tenant already holds more, it is evicted down to the limit at once.
func (t *Tree) SetTenantLimit(tenant string, maxTokens int) {
	t.lockSelection()
	defer t.mu.Unlock()
	maxTokens = max(maxTokens, 0)
	if maxTokens == 0 {
		delete(t.limits, tenant)
	} else {
		t.limits[tenant] = maxTokens
		t.index() // kept from now on
	}
	if id, ok := t.ids[tenant]; ok {
		t.tenants[id].limit = maxTokens
		t.enforceLimit(id)
	}
}

// enforce keeps tenant id within its limit and then the tree within its
// budget, after an insert for id. The caller holds the write lock.
func (t *Tree) enforce(id uint32) {
	t.enforceLimit(id)
	t.enforceBudget()
}

// enforceLimit evicts tenant id's frontier, speculative holdings first and
// each kind in eviction order, until it is within its limit. The caller
// holds the write lock.
func (t *Tree) enforceLimit(id uint32) {
	tn := &t.tenants[id]
	if tn.limit == 0 || tn.tokens <= tn.limit {
		return
	}
	x := t.index()
	for tn.tokens > tn.limit {
		e, ok := x.pop(id)
		if !ok {
			return
		}
		t.evictEntry(id, e)
	}
}

package tree

// A tenant's limit is its engine's KV capacity: the engine cannot hold more,
// so the tree never credits a worker with more than that, whatever room the
// global budget has left. It holds after every insert, as the budget does:
// an insert that takes the tenant over its limit evicts that tenant's
// holdings, in the tree's eviction order, down to a sixteenth under the
// limit before it releases the write lock.
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
// Cost: finding the tenant's frontier walks the nodes it holds (and looks at
// their children), not the whole tree: O(the tenant's nodes), at most
// limit/PageSize of them. The low-water mark makes that walk happen once per
// limit/16 tokens newly inserted for the tenant, so amortized it is about
// 16/PageSize node visits per inserted token.

// SetTenantLimit caps the stored tokens tenant may hold; maxTokens <= 0
// removes the cap. The setting is kept by name: it applies to a tenant not
// in the tree yet, and survives ClearTenant; RemoveTenant drops it. If the
// tenant already holds more, it is evicted down to the low-water mark at
// once.
func (t *Tree) SetTenantLimit(tenant string, maxTokens int) {
	t.lockSelection()
	defer t.mu.Unlock()
	maxTokens = max(maxTokens, 0)
	if maxTokens == 0 {
		delete(t.limits, tenant)
	} else {
		t.limits[tenant] = maxTokens
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
// each kind in eviction order, down to 15/16 of its limit if it is over it.
// The caller holds the write lock.
func (t *Tree) enforceLimit(id uint32) {
	tn := &t.tenants[id]
	if tn.limit == 0 || tn.tokens <= tn.limit {
		return
	}
	h := &candHeap{order: t.order, items: t.tenantFrontier(id)}
	h.heapify()
	// Speculative holdings go down to the low-water mark; confirmed ones
	// (reached only when nothing speculative is left) only as far as the
	// limit: they are what the engine holds, and it holds at most that.
	target := tn.limit - tn.limit/16
	for len(h.items) > 0 && tn.tokens > target {
		if h.items[0].confirmed && tn.tokens <= tn.limit {
			break
		}
		t.evictOne(h, h.pop())
	}
}

// tenantFrontier returns tenant id's frontier pairs: the nodes it holds
// where it holds no child. Holdings are prefix-closed, so the walk enters
// only nodes the tenant holds.
func (t *Tree) tenantFrontier(id uint32) []cand {
	var dst []cand
	stack := []*node{&t.root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		leaf := true
		for _, k := range n.kids {
			if k.n.holderIndex(id) >= 0 {
				stack = append(stack, k.n)
				leaf = false
			}
		}
		if leaf && n != &t.root {
			h := n.holders[n.holderIndex(id)]
			dst = append(dst, cand{n, id, h.aux, h.tick, h.confirmed()})
		}
	}
	return dst
}

package tree

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkIndex checks the frontier index against a walk of the tree: every
// live tenant's frontier pair has an entry no later in the order than its
// current key, the heaps and the heap of tenants are in order, and no heap
// outgrew its bound. The caller holds the lock.
func checkIndex(tr *Tree) error {
	x := tr.idx
	if x == nil {
		return nil
	}
	type pair struct {
		n  *node
		id uint32
	}
	first := map[pair]fentry{} // the earliest entry of each pair
	for id, h := range x.heaps {
		for i := range h {
			if i > 0 && x.less(&h[i], &h[(i-1)/2]) {
				return fmt.Errorf("tenant %d's heap out of order at %d", id, i)
			}
			p := pair{h[i].n, uint32(id)}
			if f, ok := first[p]; !ok || x.less(&h[i], &f) {
				first[p] = h[i]
			}
		}
		if len(h) > 2*tr.tenants[id].refs+64 {
			return fmt.Errorf("tenant %d: %d entries for %d holder entries", id, len(h), tr.tenants[id].refs)
		}
		if (len(h) > 0) != (x.at[id] >= 0) || x.at[id] >= 0 && x.tops[x.at[id]] != uint32(id) {
			return fmt.Errorf("tenant %d: at %d with %d entries", id, x.at[id], len(h))
		}
	}
	for _, c := range tr.frontier(nil) {
		f, ok := first[pair{c.n, c.tenant}]
		if cur := (fentry{c.n, c.tick, c.aux, c.confirmed}); !ok || x.less(&cur, &f) {
			return fmt.Errorf("tenant %d: frontier pair %v has no entry at or before its key", c.tenant, c.n.tokens)
		}
	}
	for i := 1; i < len(x.tops); i++ {
		if x.topLess(i, (i-1)/2) {
			return fmt.Errorf("tenants' heap out of order at %d", i)
		}
	}
	return nil
}

// TestInlineEvictionIsExact checks that the inline eviction of an insert
// over a tenant's limit or the budget, which pops the frontier index,
// evicts exactly what the walk it replaced evicts: one heap of the walked
// frontier (the tenant's, then everyone's), popped until within bounds. Two
// trees follow the same random history, in every order: one with a budget
// and limits, the other without, evicted by the walk after each operation.
// Trims, expiries, Extend, tenant removals and the periodic Evict (under a
// budget lowered for a moment) keep changing the frontier in between.
func TestInlineEvictionIsExact(t *testing.T) {
	seeds := 4
	if testing.Short() {
		seeds = 1
	}
	for _, policy := range []string{"lru", "lfu", "fifo", "mru", "filo", "priority"} {
		for seed := range seeds {
			t.Run(fmt.Sprintf("%s/%d", policy, seed), func(t *testing.T) {
				const budget = 300
				limits := map[string]int{"w0": 60, "w1": 120}
				inline := mustNew(t, Config{PageSize: 1, Policy: policy, MaxTokens: budget})
				walked := mustNew(t, Config{PageSize: 1, Policy: policy})
				for tn, l := range limits {
					inline.SetTenantLimit(tn, l)
				}
				walked.idx = nil // SetTenantLimit is not called on it: it keeps none
				rng := rand.New(rand.NewPCG(uint64(seed), 11))
				var ticks []decision
				for step := range 2000 {
					if step%100 == 0 {
						checkInvariants(t, inline)
					}
					ids := make([]uint32, 1+rng.IntN(10))
					for j := range ids {
						ids[j] = rng.Uint32N(3)
					}
					tn := fmt.Sprint("w", rng.IntN(5))
					inserted := true
					switch op := rng.IntN(20); {
					case op < 10:
						p := rng.Int32N(4)
						inline.InsertPriority(ids, tn, p)
						walked.InsertPriority(ids, tn, p)
						ticks = append(ticks, decision{ids, tn, inline.clock})
					case op < 13:
						inline.InsertConfirmed(ids, tn)
						walked.InsertConfirmed(ids, tn)
					case op < 15 && len(ticks) > 0:
						d := ticks[rng.IntN(len(ticks))]
						reply := []uint32{rng.Uint32N(3), rng.Uint32N(3)}
						inline.Extend(d.tick, d.ids, reply, d.tenant)
						walked.Extend(d.tick, d.ids, reply, d.tenant)
						tn = d.tenant
					case op < 17:
						inserted = false
						k := rng.IntN(len(ids))
						inline.Trim(ids, tn, k)
						walked.Trim(ids, tn, k)
					case op < 19 && len(ticks) > 0:
						inserted = false
						d := ticks[rng.IntN(len(ticks))]
						if a, b := inline.ExpireSpeculative(d.ids, d.tenant, d.tick), walked.ExpireSpeculative(d.ids, d.tenant, d.tick); a != b {
							t.Fatalf("step %d: ExpireSpeculative dropped %d and %d", step, a, b)
						}
					case step%200 == 0:
						inserted = false
						for _, tr := range []*Tree{inline, walked} {
							setBudget(tr, budget*9/10)
							tr.Evict()
							setBudget(tr, 0)
						}
						setBudget(inline, budget)
						if rng.IntN(2) == 0 {
							inline.ClearTenant(tn)
							walked.ClearTenant(tn)
						}
					default:
						inserted = false
					}
					if inserted {
						walkEvict(walked, tn, limits[tn], budget)
					}
					if fingerprint(inline) == fingerprint(walked) {
						continue
					}
					for i := range 5 {
						name := fmt.Sprint("w", i)
						g, w := sortedHoldings(inline, name), sortedHoldings(walked, name)
						if !slices.EqualFunc(g, w, slices.Equal) {
							t.Fatalf("step %d: %s keeps %d paths after the index's eviction, %d after the walk's", step, name, len(g), len(w))
						}
					}
					t.Fatalf("step %d: the trees differ but their tenants' holdings do not", step)
				}
			})
		}
	}
}

// walkEvict is the inline eviction as it was before the index: tenant's
// walked frontier in one heap, popped until it is within limit (0 for
// none), then every tenant's until the tree is within budget.
func walkEvict(tr *Tree, tenant string, limit, budget int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	id := tr.ids[tenant]
	if tn := &tr.tenants[id]; limit > 0 && tn.tokens > limit {
		h := &candHeap{order: tr.order}
		for _, c := range tr.frontier(nil) {
			if c.tenant == id {
				h.items = append(h.items, c)
			}
		}
		h.heapify()
		for len(h.items) > 0 && tn.tokens > limit {
			tr.evictOne(h, h.pop())
		}
	}
	if tr.tokens > budget {
		h := &candHeap{order: tr.order, items: tr.frontier(nil)}
		h.heapify()
		for len(h.items) > 0 && tr.tokens > budget {
			tr.evictOne(h, h.pop())
		}
	}
}

// fingerprint hashes a tree's shape and who holds each node. Two trees
// that saw the same operations have the same ids for the same names, and
// nodes in the same places, unless they differ in holdings.
func fingerprint(tr *Tree) uint64 {
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	// Each subtree hashes its tokens, its holders and the sum of its
	// children's hashes: a sum, because the order of kids follows the
	// tree's seeded page hash, which differs between trees.
	var walk func(n *node) uint64
	walk = func(n *node) uint64 {
		h := uint64(14695981039346656037)
		mix := func(v uint64) { h = (h ^ v) * 1099511628211 }
		mix(uint64(len(n.tokens)))
		for _, t := range n.tokens {
			mix(uint64(t))
		}
		var ids uint64 // a bit per tenant id: the test has fewer than 64
		for _, hd := range n.holders {
			ids |= 1 << hd.id()
		}
		mix(ids)
		var kids uint64
		for _, k := range n.kids {
			kids += walk(k.n)
		}
		mix(kids)
		return h
	}
	return walk(&tr.root)
}

// TestFrontierIndexCompacts checks the index's memory bound when probes
// fall behind: a heap past twice its tenant's holder entries (plus 64) is
// compacted to its current entries by the next push or removal.
func TestFrontierIndexCompacts(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 1, MaxTokens: 1000})
	for i := range 10 {
		tr.Insert([]uint32{uint32(i), 1}, "a")
		tr.Insert([]uint32{uint32(i), 1, 2}, "a")
	}
	id := tr.ids["a"]
	inner := tr.root.kids[0].n // off a's frontier: a holds its child
	for i := range 200 {
		tr.idx.push(id, fentry{n: inner, tick: uint64(i)})
	}
	if n := len(tr.idx.heaps[id]); n < 200 {
		t.Fatalf("%d entries after pushing 200 stale ones", n)
	}
	tr.Insert([]uint32{100, 1, 2}, "a")
	if n := len(tr.idx.heaps[id]); n != 11 {
		t.Fatalf("%d entries after the next insert, want 11 (a's frontier)", n)
	}
	checkInvariants(t, tr)
}

// candHeap is a binary min-heap of walked frontier pairs in eviction order:
// the eviction the index replaced, kept as the tests' reference.
type candHeap struct {
	order order
	items []cand
}

func (h *candHeap) less(a, b *cand) bool {
	return keyLess(h.order, a.confirmed, a.aux, a.tick, b.confirmed, b.aux, b.tick)
}

func (h *candHeap) push(c cand) {
	h.items = append(h.items, c)
	for i := len(h.items) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(&h.items[i], &h.items[p]) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

func (h *candHeap) pop() cand {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	h.siftDown(0)
	return top
}

func (h *candHeap) heapify() {
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.siftDown(i)
	}
}

func (h *candHeap) siftDown(i int) {
	n := len(h.items)
	for {
		l, m := 2*i+1, i
		if l < n && h.less(&h.items[l], &h.items[m]) {
			m = l
		}
		if r := l + 1; r < n && h.less(&h.items[r], &h.items[m]) {
			m = r
		}
		if m == i {
			return
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
}

// evictOne evicts candidate c if it is still valid, pushing it back with its
// new key if that changed, and pushing its parent if that joins the
// frontier. It returns the stored tokens removed. The caller holds the write
// lock.
func (t *Tree) evictOne(h *candHeap, c cand) int {
	n := c.n
	if n.deleted() || !t.tenants[c.tenant].live {
		return 0
	}
	i := n.holderIndex(c.tenant)
	if i < 0 || !n.leafFor(c.tenant) {
		return 0
	}
	if hd := n.holders[i]; hd.aux != c.aux || hd.tick != c.tick || hd.confirmed() != c.confirmed {
		c.aux, c.tick, c.confirmed = hd.aux, hd.tick, hd.confirmed()
		h.push(c)
		return 0
	}
	p := n.parent
	evicted := len(n.tokens)
	t.removeHolder(n, i)
	if p != &t.root && !p.deleted() {
		if j := p.holderIndex(c.tenant); j >= 0 && p.leafFor(c.tenant) {
			hd := p.holders[j]
			h.push(cand{p, c.tenant, hd.aux, hd.tick, hd.confirmed()})
		}
	}
	return evicted
}

// TestFrontierIndexChurn checks that the probes keep the index small under
// the churn routing makes without evicting anything: speculative prompts
// inserted below a shared prefix and expired or trimmed again, re-touched
// prompts, a frontier node leaving and rejoining the frontier over and over.
// No heap may need a whole compaction.
func TestFrontierIndexChurn(t *testing.T) {
	for _, policy := range []string{"lru", "lfu", "fifo", "mru", "filo", "priority"} {
		t.Run(policy, func(t *testing.T) {
			tr := mustNew(t, Config{PageSize: 1, Policy: policy, MaxTokens: 1 << 30})
			shared := []uint32{1, 2, 3}
			tr.Insert(shared, "a")
			rng := rand.New(rand.NewPCG(3, 3))
			for i := range 20000 {
				p := append(slices.Clone(shared), uint32(10+rng.IntN(4)), uint32(i))
				tick := tr.InsertSpeculative(p, "a")
				tr.Insert(shared, "a") // a known prompt: the shared node is touched
				switch rng.IntN(3) {
				case 0:
					tr.ExpireSpeculative(p, "a", tick)
				case 1:
					tr.Trim(p, "a", len(shared))
				default:
					tr.Trim(p, "a", len(shared)+1)
				}
			}
			checkInvariants(t, tr)
			if n := tr.idx.compactions; n > 0 {
				t.Errorf("%d whole-heap compactions", n)
			}
			if n, refs := len(tr.idx.heaps[tr.ids["a"]]), tr.tenants[tr.ids["a"]].refs; n > 2*refs+64 {
				t.Errorf("%d entries for %d holder entries", n, refs)
			}
		})
	}
}

// TestFrontierIndexRepeatedTouches: where every touch of a holding pushes
// an entry (MRU order), one leaf touched again and again leaves entries
// that all name a pair on the frontier; a compaction keeps only the
// earliest of each pair, so the heap stays within twice the holder entries
// (plus 64) and the leaf is still evicted first.
func TestFrontierIndexRepeatedTouches(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 1, Policy: "mru", MaxTokens: 1 << 30})
	tr.Insert([]uint32{1, 2, 3}, "a")
	hot := []uint32{7, 8}
	for range 1000 {
		tr.Insert(hot, "a")
	}
	checkInvariants(t, tr)
	id := tr.ids["a"]
	if n, refs := len(tr.idx.heaps[id]), tr.tenants[id].refs; n > 2*refs+64 {
		t.Fatalf("%d entries for %d holder entries", n, refs)
	}
	if tr.idx.compactions == 0 {
		t.Fatal("no compaction: the test no longer piles entries up")
	}
	tr.SetTenantLimit("a", 3)
	if got := tr.Match(hot).Of("a"); got != 0 {
		t.Fatalf("the most recently used leaf still matches %d tokens after the limit evicted it", got)
	}
}

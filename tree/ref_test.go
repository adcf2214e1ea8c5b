package tree

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// ref is the brute-force model: per tenant, the set of page paths it holds
// (every whole-page prefix of what was inserted), each with the logical time
// it was last touched. Keys are the tokens as fixed-width bytes, so a key's
// prefix is a path's prefix.
type ref struct {
	ps    int
	clock uint64
	held  map[string]map[string]uint64
}

func key(ids []uint32) string {
	b := make([]byte, 4*len(ids))
	for i, v := range ids {
		binary.BigEndian.PutUint32(b[4*i:], v)
	}
	return string(b)
}

func (r *ref) cut(ids []uint32) []uint32 { return ids[:len(ids)-len(ids)%r.ps] }

func (r *ref) match(ids []uint32, tenant string) int {
	ids = r.cut(ids)
	k := 0
	for k < len(ids) {
		if _, ok := r.held[tenant][key(ids[:k+r.ps])]; !ok {
			break
		}
		k += r.ps
	}
	return k
}

func (r *ref) insert(ids []uint32, tenant string) {
	ids = r.cut(ids)
	if len(ids) == 0 {
		return
	}
	r.clock++
	if r.held[tenant] == nil {
		r.held[tenant] = map[string]uint64{}
	}
	for k := r.ps; k <= len(ids); k += r.ps {
		r.held[tenant][key(ids[:k])] = r.clock
	}
}

func (r *ref) trim(ids []uint32, tenant string, keep int) {
	ids = r.cut(ids)
	keep = max(0, keep-keep%r.ps)
	if keep >= len(ids) {
		return
	}
	p := key(ids[:keep+r.ps])
	for k := range r.held[tenant] {
		if strings.HasPrefix(k, p) {
			delete(r.held[tenant], k)
		}
	}
}

func (r *ref) tokens(tenant string) int { return len(r.held[tenant]) * r.ps }

// syncEvict replaces the model's holdings with what the tree kept after an
// eviction, checking that the tree kept a prefix-closed subset of what the
// model holds, and (for LRU) that nothing evicted was touched after anything
// kept.
func (r *ref) syncEvict(t *testing.T, tr *Tree, lru bool) {
	t.Helper()
	kept := map[string]map[string]uint64{}
	tr.Walk(func(tenant string, path []uint32) {
		if kept[tenant] == nil {
			kept[tenant] = map[string]uint64{}
		}
		for k := r.ps; k <= len(path); k += r.ps {
			kk := key(path[:k])
			tick, ok := r.held[tenant][kk]
			if !ok {
				t.Fatalf("after Evict %s holds %v, which it never held", tenant, path[:k])
			}
			kept[tenant][kk] = tick
		}
	})
	var newestGone, oldestKept uint64 = 0, ^uint64(0)
	for tenant, paths := range r.held {
		for k, tick := range paths {
			if _, ok := kept[tenant][k]; ok {
				oldestKept = min(oldestKept, tick)
			} else {
				newestGone = max(newestGone, tick)
			}
		}
	}
	if lru && newestGone > oldestKept {
		t.Fatalf("LRU evicted a path touched at %d but kept one touched at %d", newestGone, oldestKept)
	}
	r.held = kept
}

// syncInline follows the eviction an insert did by itself when it took the
// tree over budget, and checks that the budget held.
func (r *ref) syncInline(t *testing.T, tr *Tree, cfg Config) {
	t.Helper()
	total := 0
	for tn := range r.held {
		total += r.tokens(tn)
	}
	if cfg.MaxTokens == 0 || total <= cfg.MaxTokens {
		return
	}
	r.syncEvict(t, tr, cfg.Policy == "lru")
	if s := tr.Stats(); s.Tokens > cfg.MaxTokens {
		t.Fatalf("%d tokens after an insert, budget %d", s.Tokens, cfg.MaxTokens)
	}
}

// run drives a tree and the model through ops decoded from b, checking
// every match and counter after every op. It is shared by the random test
// and the fuzz test.
func run(t *testing.T, b []byte) {
	t.Helper()
	next := func() byte {
		if len(b) == 0 {
			return 0
		}
		c := b[0]
		b = b[1:]
		return c
	}
	policies := []string{"lru", "lfu", "fifo", "mru", "filo", "priority"}
	cfg := Config{PageSize: 1 + int(next()%4), Policy: policies[int(next())%len(policies)], MaxTokens: int(next() % 48)}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &ref{ps: cfg.PageSize, held: map[string]map[string]uint64{}}
	tenants := []string{"a", "b", "c", "d"}
	alphabet := 2 + uint32(next()%2)
	ids := func() []uint32 {
		n := int(next() % 14)
		s := make([]uint32, n)
		for i := range s {
			s[i] = uint32(next()) % alphabet
		}
		return s
	}
	for step := 0; len(b) > 0; step++ {
		op := next() % 16
		switch {
		case op < 5:
			in, tn := ids(), tenants[next()%4]
			tr.Insert(in, tn)
			r.insert(in, tn)
			r.syncInline(t, tr, cfg)
		case op < 9:
			in := ids()
			pick := next()
			var seen Match
			m, got := tr.MatchInsert(in, func(m Match) string {
				seen = m
				if pick%5 == 4 {
					return ""
				}
				return tenants[pick%4]
			})
			if !slices.Equal(m.Tenants, seen.Tenants) || m.Input != seen.Input {
				t.Fatalf("step %d: MatchInsert returned %v, choose saw %v", step, m, seen)
			}
			checkMatch(t, step, r, m, in)
			if got != "" {
				r.insert(in, got)
				r.syncInline(t, tr, cfg)
			}
		case op < 11:
			in := ids()
			checkMatch(t, step, r, tr.Match(in), in)
		case op < 13:
			tr.Evict()
			r.syncEvict(t, tr, cfg.Policy == "lru")
			if s := tr.Stats(); cfg.MaxTokens > 0 && s.Tokens > cfg.MaxTokens {
				t.Fatalf("step %d: %d tokens after Evict, budget %d", step, s.Tokens, cfg.MaxTokens)
			}
		case op < 14:
			tn := tenants[next()%4]
			tr.RemoveTenant(tn)
			delete(r.held, tn)
		default:
			in, tn, keep := ids(), tenants[next()%4], int(next()%14)
			tr.Trim(in, tn, keep)
			r.trim(in, tn, keep)
		}
		total := 0
		for _, tn := range tenants {
			if got, want := tr.TenantTokens(tn), r.tokens(tn); got != want {
				t.Fatalf("step %d: TenantTokens(%s) = %d, want %d", step, tn, got, want)
			}
			total += r.tokens(tn)
		}
		if s := tr.Stats(); s.Tokens != total {
			t.Fatalf("step %d: Stats.Tokens = %d, want %d", step, s.Tokens, total)
		}
		checkInvariants(t, tr)
	}
}

func checkMatch(t *testing.T, step int, r *ref, m Match, in []uint32) {
	t.Helper()
	if want := len(r.cut(in)); m.Input != want {
		t.Fatalf("step %d: Input = %d, want %d", step, m.Input, want)
	}
	for _, tn := range []string{"a", "b", "c", "d"} {
		if got, want := m.Of(tn), r.match(in, tn); got != want {
			t.Fatalf("step %d: match %v for %s = %d, want %d (all %v)", step, in, tn, got, want, m.Tenants)
		}
	}
	for _, tm := range m.Tenants {
		if tm.Tokens <= 0 {
			t.Fatalf("step %d: %v lists a tenant with no match", step, m.Tenants)
		}
	}
}

// checkInvariants walks the tree and checks its structure and counters.
func checkInvariants(t *testing.T, tr *Tree) {
	t.Helper()
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	nodes, unique, tokens := 0, 0, 0
	perTenant := make([]int, len(tr.tenants))
	refs := make([]int, len(tr.tenants))
	var walk func(n *node)
	walk = func(n *node) {
		for i, k := range n.kids {
			c := k.n
			if c.parent != n || c.deleted() || k.first != c.tokens[0] {
				panic(fmt.Sprintf("bad child edge %d of %v", i, n.tokens))
			}
			if i > 0 && n.kids[i-1].first > k.first {
				panic("children out of order")
			}
			if len(c.tokens)%tr.pageSize != 0 || len(c.holders) == 0 {
				panic(fmt.Sprintf("node %v: %d holders", c.tokens, len(c.holders)))
			}
			for j := range i {
				if equal(n.kids[j].n.tokens[:tr.pageSize], c.tokens[:tr.pageSize]) {
					panic("two children share a first page")
				}
			}
			nodes++
			unique += len(c.tokens)
			for _, h := range c.holders {
				refs[h.tenant]++
				if tr.tenants[h.tenant].live {
					perTenant[h.tenant] += len(c.tokens)
					tokens += len(c.tokens)
					if n != &tr.root && n.holderIndex(h.tenant) < 0 {
						panic("holdings not prefix-closed")
					}
				}
			}
			walk(c)
		}
	}
	walk(&tr.root)
	if nodes != tr.nodes || unique != tr.unique || tokens != tr.tokens {
		t.Fatalf("counters nodes/unique/tokens = %d/%d/%d, walk says %d/%d/%d", tr.nodes, tr.unique, tr.tokens, nodes, unique, tokens)
	}
	for id, tn := range tr.tenants {
		if tn.refs != refs[id] || tn.live && tn.tokens != perTenant[id] {
			t.Fatalf("tenant %d %+v: walk says refs %d tokens %d", id, tn, refs[id], perTenant[id])
		}
	}
}

func TestAgainstReference(t *testing.T) {
	rounds := 400
	if testing.Short() {
		rounds = 50
	}
	for seed := range rounds {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		b := make([]byte, 64+rng.IntN(1500))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { run(t, b) })
	}
}

func FuzzTree(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 20, 0, 1, 5, 0, 1, 0, 1, 0, 1, 0, 12, 9, 3})
	f.Add([]byte{1, 1, 8, 1, 2, 6, 1, 1, 1, 0, 0, 4, 6, 1, 1, 1, 1, 2, 11, 13, 1, 15, 4, 0, 1, 1, 1, 2})
	f.Add([]byte{3, 2, 30, 0, 6, 13, 0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 2, 1, 0, 7, 13, 0, 1, 2, 1, 2, 2, 2, 0, 3, 12})
	f.Add([]byte("insert match evict trim remove: a page-aligned multi-tenant tree"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 4096 {
			b = b[:4096]
		}
		run(t, b)
	})
}

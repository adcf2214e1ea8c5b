package tree

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// ref is the brute-force model: per tenant, the set of page paths it holds
// (every whole-page prefix of what was inserted), each with the logical time
// it was last touched and whether a KV event confirmed it; and the tenants'
// limits. Keys are the tokens as fixed-width bytes, so a key's prefix is a
// path's prefix.
type ref struct {
	ps     int
	clock  uint64
	held   map[string]map[string]page
	limits map[string]int
}

type page struct {
	tick      uint64
	confirmed bool
}

func key(ids []uint32) string {
	b := make([]byte, 4*len(ids))
	for i, v := range ids {
		binary.BigEndian.PutUint32(b[4*i:], v)
	}
	return string(b)
}

func (r *ref) cut(ids []uint32) []uint32 { return ids[:len(ids)-len(ids)%r.ps] }

// match returns how much of ids tenant holds, and holds confirmed.
func (r *ref) match(ids []uint32, tenant string) (tokens, confirmed int) {
	ids = r.cut(ids)
	for tokens < len(ids) {
		p, ok := r.held[tenant][key(ids[:tokens+r.ps])]
		if !ok {
			break
		}
		tokens += r.ps
		if p.confirmed && confirmed == tokens-r.ps {
			confirmed = tokens
		}
	}
	return tokens, confirmed
}

// insert returns the insert's tick, 0 if it inserted nothing.
func (r *ref) insert(ids []uint32, tenant string, confirm bool) uint64 {
	ids = r.cut(ids)
	if len(ids) == 0 {
		return 0
	}
	r.clock++
	if r.held[tenant] == nil {
		r.held[tenant] = map[string]page{}
	}
	for k := r.ps; k <= len(ids); k += r.ps {
		kk := key(ids[:k])
		r.held[tenant][kk] = page{r.clock, confirm || r.held[tenant][kk].confirmed}
	}
	return r.clock
}

// dropFrom drops tenant's pages whose path starts with prefix p, and returns
// the tokens dropped.
func (r *ref) dropFrom(tenant, p string) int {
	n := 0
	for k := range r.held[tenant] {
		if strings.HasPrefix(k, p) {
			delete(r.held[tenant], k)
			n += r.ps
		}
	}
	return n
}

func (r *ref) trim(ids []uint32, tenant string, keep int) {
	ids = r.cut(ids)
	keep = max(0, keep-keep%r.ps)
	if keep >= len(ids) {
		return
	}
	r.dropFrom(tenant, key(ids[:keep+r.ps]))
}

// expire follows ExpireSpeculative page by page: the first page on ids' path
// held speculatively and touched at or before tick goes, with all below it.
func (r *ref) expire(ids []uint32, tenant string, tick uint64) int {
	ids = r.cut(ids)
	if tick == 0 {
		return 0
	}
	for k := r.ps; k <= len(ids); k += r.ps {
		p, ok := r.held[tenant][key(ids[:k])]
		if !ok {
			return 0
		}
		if !p.confirmed && p.tick <= tick {
			return r.dropFrom(tenant, key(ids[:k]))
		}
	}
	return 0
}

func (r *ref) tokens(tenant string) int { return len(r.held[tenant]) * r.ps }

func (r *ref) confirmed(tenant string) int {
	n := 0
	for _, p := range r.held[tenant] {
		if p.confirmed {
			n += r.ps
		}
	}
	return n
}

// sync replaces the model's holdings (of tenant only, if not "") with what
// the tree kept after an eviction, checking that the tree kept a subset of
// what the model holds, and for LRU that nothing evicted was touched after
// anything kept: across tenants (global), or within each tenant. Holdings
// being prefix-closed is checkInvariants' job.
func (r *ref) sync(t *testing.T, tr *Tree, only string, lru, global bool) {
	t.Helper()
	for tenant, pages := range r.held {
		if only != "" && tenant != only {
			continue
		}
		kept := map[string]page{}
		for _, path := range tr.Holdings(tenant, false) {
			kk := key(path)
			p, ok := pages[kk]
			if !ok {
				t.Fatalf("after eviction %s holds %v, which it never held", tenant, path)
			}
			kept[kk] = p
		}
		r.held[tenant] = kept
		if lru && !global && len(kept) > 0 {
			checkLimitOrder(t, pages, kept)
		}
	}
}

// checkLimitOrder checks a tenant limit's eviction from before to after:
// speculative pages go before confirmed ones, and each kind least recently
// used first.
func checkLimitOrder(t *testing.T, before, after map[string]page) {
	t.Helper()
	checkEvictionOrder(t, map[string]map[string]page{"": before}, map[string]map[string]page{"": after})
}

// checkEvictionOrder checks an eviction from before to after (tenant →
// pages): speculative pages go before confirmed ones, and each kind least
// recently used first.
func checkEvictionOrder(t *testing.T, before, after map[string]map[string]page) {
	t.Helper()
	split := func(m map[string]map[string]page, confirmed bool) map[string]map[string]page {
		out := map[string]map[string]page{}
		for tn, pages := range m {
			out[tn] = map[string]page{}
			for k, p := range pages {
				if p.confirmed == confirmed {
					out[tn][k] = p
				}
			}
		}
		return out
	}
	count := func(m map[string]map[string]page) (n int) {
		for _, pages := range m {
			n += len(pages)
		}
		return n
	}
	specBefore, specAfter := split(before, false), split(after, false)
	confBefore, confAfter := split(before, true), split(after, true)
	if count(confAfter) < count(confBefore) && count(specAfter) > 0 {
		t.Fatalf("eviction took a confirmed page while %d speculative ones stayed", count(specAfter))
	}
	if count(specAfter) > 0 {
		checkLRU(t, specBefore, specAfter)
	}
	if count(confAfter) > 0 {
		checkLRU(t, confBefore, confAfter)
	}
}

// checkLRU checks that nothing in before but not in after was touched after
// anything in after.
func checkLRU(t *testing.T, before, after map[string]map[string]page) {
	t.Helper()
	var newestGone, oldestKept uint64 = 0, ^uint64(0)
	for tenant, pages := range before {
		for k, p := range pages {
			if _, ok := after[tenant][k]; ok {
				oldestKept = min(oldestKept, p.tick)
			} else {
				newestGone = max(newestGone, p.tick)
			}
		}
	}
	if newestGone > oldestKept {
		t.Fatalf("LRU evicted a path touched at %d but kept one touched at %d", newestGone, oldestKept)
	}
}

func (r *ref) syncEvict(t *testing.T, tr *Tree, lru bool) {
	t.Helper()
	before := maps.Clone(r.held)
	r.sync(t, tr, "", lru, true)
	if lru {
		checkEvictionOrder(t, before, r.held)
	}
}

// syncInline follows the eviction an insert for tenant did by itself when it
// took the tenant over its limit or the tree over budget, and checks that
// both held.
func (r *ref) syncInline(t *testing.T, tr *Tree, cfg Config, tenant string) {
	t.Helper()
	lru := cfg.Policy == "lru"
	total := 0
	for tn := range r.held {
		total += r.tokens(tn)
	}
	if limit := r.limits[tenant]; limit > 0 && r.tokens(tenant) > limit {
		// The limit evicted some of tenant's holdings, and then the budget
		// may have evicted anyone's: the LRU order holds within each tenant.
		r.sync(t, tr, "", lru, false)
		if n := tr.TenantTokens(tenant); n > limit {
			t.Fatalf("%s holds %d tokens after an insert, limit %d", tenant, n, limit)
		}
	} else if cfg.MaxTokens > 0 && total > cfg.MaxTokens {
		r.syncEvict(t, tr, lru)
	}
	if s := tr.Stats(); cfg.MaxTokens > 0 && s.Tokens > cfg.MaxTokens {
		t.Fatalf("%d tokens after an insert, budget %d", s.Tokens, cfg.MaxTokens)
	}
}

// decision is an insert the model may expire later.
type decision struct {
	ids    []uint32
	tenant string
	tick   uint64
}

// run drives a tree and the model through ops decoded from b, checking
// every match, counter and holding after every op. It is shared by the
// random test and the fuzz test.
func run(t *testing.T, b []byte) { runModel(t, b, false) }

// runModel is run; wide draws tokens from 256 values, pages of one token,
// a budget of 4,096 tokens and tenant limits of up to 1,792, so that nodes
// have children by the hundred (past wideAt, kids.go) and lose them again.
func runModel(t *testing.T, b []byte, wide bool) {
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
	if wide {
		cfg.PageSize, cfg.MaxTokens = 1, 4096
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Chunks of one to three pages, so that the short prompts here match
	// by chunk keys, split chunks and end in partial ones (chunks.go).
	tr.chunk = cfg.PageSize * (1 + cfg.MaxTokens%3)
	r := &ref{ps: cfg.PageSize, held: map[string]map[string]page{}, limits: map[string]int{}}
	tenants := []string{"a", "b", "c", "d"}
	alphabet := 2 + uint32(next()%2)
	if wide {
		alphabet = 256
	}
	ids := func() []uint32 {
		n := int(next() % 14)
		s := make([]uint32, n)
		for i := range s {
			s[i] = uint32(next()) % alphabet
		}
		return s
	}
	var decisions []decision
	record := func(in []uint32, tn string, tick uint64) {
		if tick > 0 {
			decisions = append(decisions, decision{in, tn, tick})
		}
	}
	for step := 0; len(b) > 0; step++ {
		op := next() % 24
		if wide && (op == 10 || op == 11) {
			op = 2 // an insert: a tenant cleared now and then keeps nodes narrow
		}
		switch {
		case op%2 == 1 && op < 4 && len(decisions) > 0:
			// A reply joins an earlier insert's prompt: Extend must leave
			// the tree as inserting the two together would, whatever
			// happened to that insert's path since.
			d, reply := decisions[int(next())%len(decisions)], ids()
			seq := slices.Concat(d.ids, reply)
			got := tr.Extend(d.tick, d.ids, reply, d.tenant)
			want := r.insert(seq, d.tenant, false)
			if got != want {
				t.Fatalf("step %d: Extend's tick = %d, want %d", step, got, want)
			}
			record(seq, d.tenant, got)
			r.syncInline(t, tr, cfg, d.tenant)
		case op < 4:
			in, tn := ids(), tenants[next()%4]
			tr.Insert(in, tn)
			record(in, tn, r.insert(in, tn, false))
			r.syncInline(t, tr, cfg, tn)
		case op < 8:
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
			if !slices.Equal(m.Tenants, seen.Tenants) || m.Input != seen.Input || seen.Tick != 0 {
				t.Fatalf("step %d: MatchInsert returned %v, choose saw %v", step, m, seen)
			}
			checkMatch(t, step, r, m, in)
			var tick uint64
			if got != "" {
				tick = r.insert(in, got, false)
				record(in, got, tick)
				r.syncInline(t, tr, cfg, got)
			}
			if m.Tick != tick {
				t.Fatalf("step %d: MatchInsert's Tick = %d, want %d", step, m.Tick, tick)
			}
		case op < 10:
			in := ids()
			checkMatch(t, step, r, tr.Match(in), in)
		case op < 11:
			tr.Evict()
			r.syncEvict(t, tr, cfg.Policy == "lru")
			if s := tr.Stats(); cfg.MaxTokens > 0 && s.Tokens > cfg.MaxTokens {
				t.Fatalf("step %d: %d tokens after Evict, budget %d", step, s.Tokens, cfg.MaxTokens)
			}
		case op < 12:
			tn := tenants[next()%4]
			if next()%2 == 0 {
				tr.RemoveTenant(tn)
				delete(r.limits, tn)
			} else {
				tr.ClearTenant(tn)
			}
			delete(r.held, tn)
		case op < 14:
			in, tn, keep := ids(), tenants[next()%4], int(next()%14)
			tr.Trim(in, tn, keep)
			r.trim(in, tn, keep)
		case op < 17:
			in, tn := ids(), tenants[next()%4]
			tr.InsertConfirmed(in, tn)
			r.insert(in, tn, true)
			r.syncInline(t, tr, cfg, tn)
		case op < 21:
			d := decision{ids(), tenants[next()%4], uint64(next()) % (r.clock + 1)}
			if pick := int(next()); pick%4 != 0 && len(decisions) > 0 {
				d = decisions[pick%len(decisions)]
			}
			got := tr.ExpireSpeculative(d.ids, d.tenant, d.tick)
			if want := r.expire(d.ids, d.tenant, d.tick); got != want {
				t.Fatalf("step %d: ExpireSpeculative(%v, %s, %d) = %d, want %d", step, d.ids, d.tenant, d.tick, got, want)
			}
		default:
			tn, limit := tenants[next()%4], int(next()%8)*cfg.PageSize
			if wide {
				limit *= 256
			}
			tr.SetTenantLimit(tn, limit)
			r.limits[tn] = limit
			if limit > 0 && r.tokens(tn) > limit {
				r.sync(t, tr, tn, cfg.Policy == "lru", false)
			}
		}
		checkCounters(t, step, r, tr, tenants)
		checkInvariants(t, tr)
	}
}

// checkCounters compares the tree's counters and holdings with the model's.
func checkCounters(t *testing.T, step int, r *ref, tr *Tree, tenants []string) {
	t.Helper()
	total, confirmed := 0, 0
	s := tr.Stats()
	for _, tn := range tenants {
		if got, want := tr.TenantTokens(tn), r.tokens(tn); got != want {
			t.Fatalf("step %d: TenantTokens(%s) = %d, want %d", step, tn, got, want)
		}
		if got, want := s.TenantConfirmed[tn], r.confirmed(tn); got != want {
			t.Fatalf("step %d: TenantConfirmed[%s] = %d, want %d", step, tn, got, want)
		}
		if limit := r.limits[tn]; limit > 0 && r.tokens(tn) > limit {
			t.Fatalf("step %d: %s holds %d tokens, limit %d", step, tn, r.tokens(tn), limit)
		}
		for _, confirmedOnly := range []bool{false, true} {
			var want []string
			for k, p := range r.held[tn] {
				if p.confirmed || !confirmedOnly {
					want = append(want, k)
				}
			}
			slices.Sort(want)
			var got []string
			for _, path := range tr.Holdings(tn, confirmedOnly) {
				got = append(got, key(path))
			}
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: Holdings(%s, %v) has %d pages, want %d", step, tn, confirmedOnly, len(got), len(want))
			}
		}
		total += r.tokens(tn)
		confirmed += r.confirmed(tn)
	}
	if s.Tokens != total || s.ConfirmedTokens != confirmed {
		t.Fatalf("step %d: Stats.Tokens/ConfirmedTokens = %d/%d, want %d/%d", step, s.Tokens, s.ConfirmedTokens, total, confirmed)
	}
}

func checkMatch(t *testing.T, step int, r *ref, m Match, in []uint32) {
	t.Helper()
	if want := len(r.cut(in)); m.Input != want {
		t.Fatalf("step %d: Input = %d, want %d", step, m.Input, want)
	}
	for _, tn := range []string{"a", "b", "c", "d"} {
		want, wantConfirmed := r.match(in, tn)
		if got := m.Of(tn); got != want {
			t.Fatalf("step %d: match %v for %s = %d, want %d (all %v)", step, in, tn, got, want, m.Tenants)
		}
		for _, tm := range m.Tenants {
			if tm.Tenant == tn && tm.Confirmed != wantConfirmed {
				t.Fatalf("step %d: match %v for %s confirmed %d, want %d", step, in, tn, tm.Confirmed, wantConfirmed)
			}
		}
	}
	for _, tm := range m.Tenants {
		if tm.Tokens <= 0 || tm.Confirmed > tm.Tokens {
			t.Fatalf("step %d: %v lists a tenant with no match", step, m.Tenants)
		}
	}
}

// checkInvariants walks the tree and checks its structure and counters.
func checkInvariants(t *testing.T, tr *Tree) {
	t.Helper()
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	nodes, unique, tokens, confirmed := 0, 0, 0, 0
	perTenant := make([]int, len(tr.tenants))
	perConfirmed := make([]int, len(tr.tenants))
	refs := make([]int, len(tr.tenants))
	var walk func(n *node)
	walk = func(n *node) {
		checkKidIndex(n)
		for i, k := range n.kids {
			c := k.n
			if c.parent != n || c.deleted() || k.key != tr.key(c.tokens[:tr.pageSize]) {
				panic(fmt.Sprintf("bad child edge %d of %v", i, n.tokens))
			}
			if n.wide == nil && i > 0 && n.kids[i-1].key > k.key {
				panic("children out of order")
			}
			if want := (&node{keys: tr.chunkKeys(c.tokens)}).chunks(); !slices.Equal(c.chunks(), want) {
				panic(fmt.Sprintf("node %v: chunk keys %v, want %v", c.tokens, c.chunks(), want))
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
				id := h.id()
				refs[id]++
				if tr.tenants[id].live {
					perTenant[id] += len(c.tokens)
					tokens += len(c.tokens)
					if n != &tr.root && n.holderIndex(id) < 0 {
						panic("holdings not prefix-closed")
					}
					if h.confirmed() {
						perConfirmed[id] += len(c.tokens)
						confirmed += len(c.tokens)
						if n != &tr.root && !n.holders[n.holderIndex(id)].confirmed() {
							panic("confirmed holdings not prefix-closed")
						}
					}
				}
			}
			walk(c)
		}
	}
	walk(&tr.root)
	if nodes != tr.nodes || unique != tr.unique || tokens != tr.tokens || confirmed != tr.confirmed {
		t.Fatalf("counters nodes/unique/tokens/confirmed = %d/%d/%d/%d, walk says %d/%d/%d/%d",
			tr.nodes, tr.unique, tr.tokens, tr.confirmed, nodes, unique, tokens, confirmed)
	}
	for id, tn := range tr.tenants {
		if tn.refs != refs[id] || tn.live && (tn.tokens != perTenant[id] || tn.confirmed != perConfirmed[id]) {
			t.Fatalf("tenant %d %+v: walk says refs %d tokens %d confirmed %d", id, tn, refs[id], perTenant[id], perConfirmed[id])
		}
	}
	if err := checkIndex(tr); err != nil {
		t.Fatal(err)
	}
}

func TestAgainstReference(t *testing.T) {
	randomRuns(t, 400, 50, 7, 64, 1500, run)
}

// TestAgainstReferenceWide runs the model where nodes have hundreds of
// children, indexed by key (kids.go), and lose them to evictions, trims and
// expiries; checkInvariants checks the index after every op.
func TestAgainstReferenceWide(t *testing.T) {
	randomRuns(t, 5, 2, 11, 4000, 4000, func(t *testing.T, b []byte) {
		runModel(t, b, true)
	})
}

// randomRuns calls check with rounds random op streams (short of them
// with -short), each of minLen plus up to span bytes, seeded by round and
// stream so that a failing subtest can be rerun alone.
func randomRuns(t *testing.T, rounds, short int, stream uint64, minLen, span int, check func(*testing.T, []byte)) {
	if testing.Short() {
		rounds = short
	}
	for seed := range rounds {
		rng := rand.New(rand.NewPCG(uint64(seed), stream))
		b := make([]byte, minLen+rng.IntN(span))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { check(t, b) })
	}
}

func FuzzTree(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 20, 0, 1, 5, 0, 1, 0, 1, 0, 1, 0, 12, 9, 3})
	f.Add([]byte{1, 1, 8, 1, 2, 6, 1, 1, 1, 0, 0, 4, 6, 1, 1, 1, 1, 2, 11, 13, 1, 15, 4, 0, 1, 1, 1, 2})
	f.Add([]byte{3, 2, 30, 0, 6, 13, 0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 2, 1, 0, 7, 13, 0, 1, 2, 1, 2, 2, 2, 0, 3, 12})
	f.Add([]byte("insert match evict trim remove: a page-aligned multi-tenant tree"))
	f.Add([]byte("confirm, expire and limit: speculative holdings in a tree of KV events"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 4096 {
			b = b[:4096]
		}
		run(t, b)
	})
}

// checkKidIndex checks a node's children against their index: sorted and
// unindexed while few, indexed once many, every key found where the index
// says, and the index's count of further children with an indexed key.
func checkKidIndex(n *node) {
	w := n.wide
	switch {
	case w == nil && len(n.kids) > wideAt:
		panic(fmt.Sprintf("%d children, not indexed", len(n.kids)))
	case w != nil && len(n.kids) < narrowAt:
		panic(fmt.Sprintf("%d children, still indexed", len(n.kids)))
	case w == nil:
		return
	}
	perKey := map[uint64]int{}
	for _, k := range n.kids {
		perKey[k.key]++
	}
	dups := 0
	for key, count := range perKey {
		i, ok := w.at[key]
		if !ok || n.kids[i].key != key {
			panic(fmt.Sprintf("key %x: indexed at %d (%v)", key, i, ok))
		}
		dups += count - 1
	}
	if len(w.at) != len(perKey) || w.dups != dups {
		panic(fmt.Sprintf("index of %d keys, %d more; the children have %d keys, %d more", len(w.at), w.dups, len(perKey), dups))
	}
}

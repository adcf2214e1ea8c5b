package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// toks builds a token slice from a compact spec: "ab|cd|e" → [a b c d e]
// ('|' is ignored; it only marks page boundaries for the reader).
func toks(spec string) []uint32 {
	var out []uint32
	for _, r := range strings.ReplaceAll(spec, "|", "") {
		out = append(out, uint32(r))
	}
	return out
}

func TestPageCacheSpec(t *testing.T) {
	type step struct {
		op     string // "acquire", "release" (of acquire #n), "insert", "match"
		tokens string
		n      int // for release: index of the acquire step's lease
		want   int // cached tokens reported (acquire, match, insert)
		ok     bool
	}
	tests := []struct {
		name     string
		pageSize int
		capacity int // pages
		steps    []step
	}{
		{
			name: "partial page is never cached", pageSize: 2, capacity: 8,
			steps: []step{
				{op: "acquire", tokens: "ab|cd|e", want: 0, ok: true},
				{op: "match", tokens: "ab|cd|e", want: 4},
				{op: "match", tokens: "ab|cd|ef", want: 4},
				{op: "match", tokens: "ab|c", want: 2},
				{op: "match", tokens: "a", want: 0},
			},
		},
		{
			name: "repeated prompt hits its whole pages", pageSize: 2, capacity: 8,
			steps: []step{
				{op: "acquire", tokens: "ab|cd|e", want: 0, ok: true},
				{op: "release", n: 0},
				{op: "acquire", tokens: "ab|cd|e", want: 4, ok: true},
				{op: "acquire", tokens: "ab|cx|yz", want: 2, ok: true},
			},
		},
		{
			name: "eviction takes the LRU leaf, so a prefix stays cached", pageSize: 2, capacity: 3,
			steps: []step{
				{op: "insert", tokens: "ab|cd|ef", want: 6},
				{op: "insert", tokens: "xy", want: 2}, // evicts ef, the only leaf
				{op: "match", tokens: "ab|cd|ef", want: 4},
				{op: "insert", tokens: "ab|cd|gh", want: 6}, // evicts xy (older than cd's touch)
				{op: "match", tokens: "xy", want: 0},
				{op: "match", tokens: "ab|cd|gh", want: 6},
			},
		},
		{
			name: "pinned pages are never evicted; a request that cannot fit waits", pageSize: 2, capacity: 3,
			steps: []step{
				{op: "acquire", tokens: "ab|cd", want: 0, ok: true},
				{op: "acquire", tokens: "xy|zw", ok: false}, // 2 free-able pages needed, 1 free
				{op: "acquire", tokens: "ab|cd|ef|gh", ok: false},
				{op: "acquire", tokens: "xy", want: 0, ok: true}, // fills the cache
				{op: "insert", tokens: "pq", want: 0},            // nothing evictable: not cached
				{op: "release", n: 0},
				{op: "acquire", tokens: "xy|zw", want: 2, ok: true}, // evicts cd, the LRU leaf
				{op: "match", tokens: "ab|cd", want: 2},
			},
		},
		{
			name: "a shared prefix pinned by one request survives", pageSize: 2, capacity: 4,
			steps: []step{
				{op: "acquire", tokens: "ab|cd", want: 0, ok: true},
				{op: "insert", tokens: "ab|cd|ef|gh", want: 8},
				{op: "insert", tokens: "mn|op", want: 4}, // evicts gh, ef
				{op: "match", tokens: "ab|cd|ef", want: 4},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newPageCache(tt.pageSize, tt.capacity)
			leases := map[int]*lease{}
			for i, s := range tt.steps {
				var got int
				switch s.op {
				case "acquire":
					l, cached, ok := c.acquire(toks(s.tokens))
					if ok != s.ok {
						t.Fatalf("step %d: acquire(%s) ok = %v, want %v", i, s.tokens, ok, s.ok)
					}
					leases[i], got = l, cached
				case "release":
					c.release(leases[s.n])
					continue
				case "insert":
					got = c.insert(toks(s.tokens))
				case "match":
					got = c.match(toks(s.tokens))
				}
				if got != s.want {
					t.Fatalf("step %d: %s(%s) = %d, want %d", i, s.op, s.tokens, got, s.want)
				}
				if c.usedPages() > tt.capacity {
					t.Fatalf("step %d: %d pages cached, capacity %d", i, c.usedPages(), tt.capacity)
				}
			}
		})
	}
}

// bruteCache is the reference model: a set of cached page paths (a path is
// the whole token prefix ending with the page, encoded) with LRU stamps and
// pin counts, every operation done the slow, obvious way.
type bruteCache struct {
	pageSize, capacity int
	clock              uint64
	paths              map[string]*bruteEntry
}

type bruteEntry struct {
	stamp uint64
	pins  int
}

func (b *bruteCache) key(tokens []uint32, pages int) string {
	return pageKey(tokens[:pages*b.pageSize])
}

func (b *bruteCache) match(tokens []uint32) int {
	k := 0
	for (k+1)*b.pageSize <= len(tokens) {
		if _, ok := b.paths[b.key(tokens, k+1)]; !ok {
			break
		}
		k++
	}
	return k
}

func (b *bruteCache) hasChild(path string) bool {
	for p := range b.paths {
		if len(p) == len(path)+4*b.pageSize && strings.HasPrefix(p, path) {
			return true
		}
	}
	return false
}

func (b *bruteCache) evictOne() bool {
	victim, best := "", uint64(0)
	for p, e := range b.paths {
		if e.pins == 0 && !b.hasChild(p) && (victim == "" || e.stamp < best) {
			victim, best = p, e.stamp
		}
	}
	if victim == "" {
		return false
	}
	delete(b.paths, victim)
	return true
}

// extend mirrors pageCache.extend; it returns the pinned paths.
func (b *bruteCache) extend(tokens []uint32, all bool) ([]string, bool) {
	m, n := b.match(tokens), len(tokens)/b.pageSize
	if all {
		evictable := 0
		for p, e := range b.paths {
			onPath := false
			for k := 1; k <= m; k++ {
				onPath = onPath || p == b.key(tokens, k)
			}
			if e.pins == 0 && !onPath {
				evictable++
			}
		}
		if b.capacity-len(b.paths)+evictable < n-m {
			return nil, false
		}
	}
	var pinned []string
	for k := 1; k <= m; k++ {
		p := b.key(tokens, k)
		b.clock++
		b.paths[p].pins++
		b.paths[p].stamp = b.clock
		pinned = append(pinned, p)
	}
	for k := m + 1; k <= n; k++ {
		if len(b.paths) >= b.capacity && !b.evictOne() {
			break
		}
		b.clock++
		p := b.key(tokens, k)
		b.paths[p] = &bruteEntry{stamp: b.clock, pins: 1}
		pinned = append(pinned, p)
	}
	return pinned, true
}

func (b *bruteCache) release(pinned []string) {
	for _, p := range pinned {
		b.paths[p].pins--
	}
}

// cachedPaths lists the real cache's pages as path keys with pin counts.
func cachedPaths(c *pageCache) map[string]int {
	out := map[string]int{}
	var visit func(n *page, prefix string)
	visit = func(n *page, prefix string) {
		for _, ch := range n.children {
			out[prefix+ch.key] = ch.pins
			visit(ch, prefix+ch.key)
		}
	}
	visit(c.root, "")
	return out
}

func TestPageCacheMatchesBruteForce(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			const pageSize, capacity = 2, 12
			rng := rand.New(rand.NewPCG(seed, 99))
			c := newPageCache(pageSize, capacity)
			b := &bruteCache{pageSize: pageSize, capacity: capacity, paths: map[string]*bruteEntry{}}
			// Prompts share prefixes: a few stems over a 3-letter alphabet.
			stems := make([][]uint32, 4)
			for i := range stems {
				for range rng.IntN(7) {
					stems[i] = append(stems[i], uint32(rng.IntN(3)))
				}
			}
			prompt := func() []uint32 {
				p := slices.Clone(stems[rng.IntN(len(stems))])
				for range rng.IntN(8) {
					p = append(p, uint32(rng.IntN(3)))
				}
				return p
			}
			type held struct {
				l     *lease
				paths []string
			}
			var active []held
			evictions, refused := 0, 0
			for step := range 3000 {
				tokens := prompt()
				var got, want int
				switch op := rng.IntN(10); {
				case op < 4 && len(active) < 5:
					l, cached, ok := c.acquire(tokens)
					wantCached := b.match(tokens) * pageSize
					paths, wantOK := b.extend(tokens, true)
					if ok != wantOK {
						t.Fatalf("step %d: acquire(%v) ok = %v, brute force %v", step, tokens, ok, wantOK)
					}
					if !ok {
						refused++
					}
					if ok {
						active = append(active, held{l, paths})
						got, want = cached, wantCached
					}
				case op < 7 && len(active) > 0:
					i := rng.IntN(len(active))
					c.release(active[i].l)
					b.release(active[i].paths)
					active = slices.Delete(active, i, i+1)
				case op < 9:
					got = c.insert(tokens)
					paths, _ := b.extend(tokens, false)
					b.release(paths)
					want = len(paths) * pageSize
				default:
					got, want = c.match(tokens), b.match(tokens)*pageSize
				}
				if got != want {
					t.Fatalf("step %d: cached tokens %d, brute force %d", step, got, want)
				}
				real := cachedPaths(c)
				if len(real) != len(b.paths) || c.usedPages() != len(real) {
					t.Fatalf("step %d: %d pages (size %d), brute force %d", step, len(real), c.usedPages(), len(b.paths))
				}
				pinned := 0
				for p, pins := range real {
					e, ok := b.paths[p]
					if !ok || e.pins != pins {
						t.Fatalf("step %d: page %q (pins %d) differs from brute force %+v", step, p, pins, e)
					}
					if pins > 0 {
						pinned++
					}
				}
				if pinned != c.pinnedPages() {
					t.Fatalf("step %d: pinned count %d, counted %d", step, c.pinnedPages(), pinned)
				}
				if len(real) > capacity {
					t.Fatalf("step %d: %d pages exceed capacity %d", step, len(real), capacity)
				}
				for _, h := range active {
					for _, p := range h.paths {
						if _, ok := real[p]; !ok {
							t.Fatalf("step %d: pinned page %q was evicted", step, p)
						}
					}
				}
				for _, ch := range c.drainChanges() {
					evictions += len(ch.removed)
				}
			}
			// The run must have exercised the interesting paths.
			if evictions < 100 || refused < 10 {
				t.Fatalf("weak run: %d evictions, %d refused acquires", evictions, refused)
			}
			t.Logf("%d evictions, %d refused acquires", evictions, refused)
		})
	}
}

func TestPageCacheChanges(t *testing.T) {
	c := newPageCache(2, 3)
	c.insert(toks("ab|cd"))
	c.insert(toks("ab|ef"))
	ch := c.drainChanges()
	if len(ch) != 2 || len(ch[0].stored) != 2 || ch[0].parent != nil {
		t.Fatalf("first insert: changes %+v, want one root chain of 2 pages", ch)
	}
	ab := ch[0].stored[0]
	if ch[1].parent != ab || len(ch[1].stored) != 1 || ch[1].stored[0].hash != blockHash(ab.hash, toks("ef")) {
		t.Fatalf("second insert should hang off ab: %+v", ch[1])
	}
	cd := ch[0].stored[1]
	c.insert(toks("xy"))
	ch = c.drainChanges()
	if len(ch) != 2 || !slices.Equal(ch[0].removed, []int64{cd.hash}) || ch[1].stored[0].key != pageKey(toks("xy")) {
		t.Fatalf("third insert: changes %+v, want cd removed then xy stored", ch)
	}
	c.flush()
	if ch = c.drainChanges(); len(ch) != 1 || !ch[0].cleared || c.usedPages() != 0 {
		t.Fatalf("flush: changes %+v, %d pages left", ch, c.usedPages())
	}
}

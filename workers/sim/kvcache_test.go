package sim

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
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

// spell is the inverse of toks, without the page marks.
func spell(tokens []uint32) string {
	r := make([]rune, len(tokens))
	for i, t := range tokens {
		r[i] = rune(t)
	}
	return string(r)
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
			c := newPageCache(tt.pageSize, tt.capacity, 1)
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
	return tokensKey(tokens[:pages*b.pageSize])
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

// tokensKey encodes tokens as a string, the brute-force model's path keys.
func tokensKey(tokens []uint32) string {
	b := make([]byte, 0, 4*len(tokens))
	for _, t := range tokens {
		b = binary.LittleEndian.AppendUint32(b, t)
	}
	return string(b)
}

// cachedPaths lists the real cache's pages as path keys with pin counts.
func cachedPaths(c *pageCache) map[string]int {
	out := map[string]int{}
	var visit func(n *page, prefix string)
	visit = func(n *page, prefix string) {
		for _, ch := range n.children {
			out[prefix+tokensKey(ch.tokens)] = ch.pins
			visit(ch, prefix+tokensKey(ch.tokens))
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
			c := newPageCache(pageSize, capacity, int64(seed))
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

// TestPageCacheChanges: the change log has one entry per stored page, in the
// order the pages entered, each hanging off the page before it (or the
// root); evictions are logged where they happen, between stores when a chain
// needs room; a flush of an idle cache is one clear.
func TestPageCacheChanges(t *testing.T) {
	const seed = 42
	c := newPageCache(2, 3, seed)
	names := map[int64]string{} // page hash -> its tokens, as stored
	// describe renders changes as "+cd<ab" (cd stored off ab), "+ab" (off
	// the root), "-cd" (removed) and "clear", checking each hash's chain.
	describe := func(changes []cacheChange) []string {
		var out []string
		for _, ch := range changes {
			switch {
			case ch.cleared:
				out = append(out, "clear")
			case ch.removed != nil:
				for _, h := range ch.removed {
					out = append(out, "-"+names[h])
				}
			default:
				p := ch.stored
				name := spell(p.tokens)
				parent, hasParent := c.parentHash(p)
				want := blockHash(seed, p.tokens)
				if hasParent {
					want = blockHash(parent, p.tokens)
					name += "<" + names[parent]
				}
				if p.hash != want {
					t.Errorf("page %s: hash %d, want %d chained from its parent", name, p.hash, want)
				}
				names[p.hash] = spell(p.tokens)
				out = append(out, "+"+name)
			}
		}
		return out
	}
	steps := []struct {
		op     string // "insert" or "flush"
		tokens string
		want   []string
	}{
		{"insert", "ab|cd", []string{"+ab", "+cd<ab"}},
		{"insert", "ab|ef", []string{"+ef<ab"}},
		{"insert", "xy", []string{"-cd", "+xy"}},
		{"insert", "gh|ij", []string{"-ef", "+gh", "-ab", "+ij<gh"}},
		{"flush", "", []string{"clear"}},
	}
	for _, s := range steps {
		if s.op == "flush" {
			c.flush()
		} else {
			c.insert(toks(s.tokens))
		}
		if got := describe(c.drainChanges()); !slices.Equal(got, s.want) {
			t.Fatalf("%s %s: changes %q, want %q", s.op, s.tokens, got, s.want)
		}
	}
	if c.usedPages() != 0 {
		t.Fatalf("%d pages left after the flush", c.usedPages())
	}
}

// TestPageCacheHashSeed: page hashes depend on the cache's seed, so two
// engines name the same content differently; with one seed they are stable.
func TestPageCacheHashSeed(t *testing.T) {
	hashes := func(seed int64) []int64 {
		c := newPageCache(2, 8, seed)
		c.insert(toks("ab|cd"))
		var out []int64
		for _, ch := range c.drainChanges() {
			out = append(out, ch.stored.hash)
		}
		return out
	}
	a, again, b := hashes(1), hashes(1), hashes(2)
	if !slices.Equal(a, again) {
		t.Fatalf("same seed, different hashes: %v, %v", a, again)
	}
	for i := range a {
		if a[i] == b[i] {
			t.Fatalf("page %d has hash %d under both seeds", i, a[i])
		}
	}
}

// TestPageCachePaths: every page appears once as its whole token path,
// sorted, so a prefix comes before its extensions.
func TestPageCachePaths(t *testing.T) {
	c := newPageCache(2, 8, 1)
	for _, p := range []string{"xy|z", "ab|ef", "ab|cd|gh"} {
		c.insert(toks(p))
	}
	var got []string
	for _, p := range c.paths() {
		got = append(got, spell(p))
	}
	want := []string{"ab", "abcd", "abcdgh", "abef", "xy"}
	if !slices.Equal(got, want) {
		t.Fatalf("paths %q, want %q", got, want)
	}
}

// TestBlockHashIsFNV1a: the hand-written blockHash is FNV-1a over the
// parent's hash and the tokens, little-endian, as hash/fnv computes it.
func TestBlockHashIsFNV1a(t *testing.T) {
	for _, tc := range []struct {
		parent int64
		tokens []uint32
	}{{0, nil}, {-1, []uint32{0}}, {0x1234_5678_9abc_def0, []uint32{1, 2, 3, 0xffffffff, 128000}}} {
		h := fnv.New64a()
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(tc.parent)))
		for _, tok := range tc.tokens {
			h.Write(binary.LittleEndian.AppendUint32(nil, tok))
		}
		if got, want := blockHash(tc.parent, tc.tokens), int64(h.Sum64()); got != want {
			t.Errorf("blockHash(%#x, %v) = %#x, want %#x", tc.parent, tc.tokens, got, want)
		}
	}
}

// TestPageIDCollisionIsAMiss: two pages whose ids collide never match each
// other; the second is left uncached rather than put in the first's place.
func TestPageIDCollisionIsAMiss(t *testing.T) {
	c := newPageCache(2, 16, 1)
	c.insert([]uint32{1, 2, 3, 4})
	// Forge a collision: re-key the first page under the id of [7 8].
	first := c.root.children[pageIDOf([]uint32{1, 2})]
	delete(c.root.children, first.key)
	first.key = pageIDOf([]uint32{7, 8})
	c.root.children[first.key] = first
	if got := c.match([]uint32{7, 8, 3, 4}); got != 0 {
		t.Errorf("match of a colliding page = %d tokens, want 0", got)
	}
	if got := c.insert([]uint32{7, 8, 3, 4}); got != 0 {
		t.Errorf("insert of a colliding page cached %d tokens, want 0", got)
	}
	if !slices.Equal(c.root.children[first.key].tokens, []uint32{1, 2}) {
		t.Error("the colliding insert replaced the cached page")
	}
}

// BenchmarkPageCacheMatch looks up an 8K-token prompt whose pages are all
// cached (page size 16), as the engine does for each request.
//
//	go test -run '^$' -bench PageCacheMatch -benchmem ./workers/sim/
func BenchmarkPageCacheMatch(b *testing.B) {
	const n, pageSize = 8192, 16
	c := newPageCache(pageSize, 2*n/pageSize, 1)
	tokens := make([]uint32, n)
	for i := range tokens {
		tokens[i] = uint32(i * 7)
	}
	c.insert(tokens)
	b.ReportAllocs()
	for range b.N {
		if got := c.match(tokens); got != n {
			b.Fatalf("match = %d, want %d", got, n)
		}
	}
}

package policy

import (
	"cmp"
	"iter"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/kvgate/kvgate/workers"
)

// ringVnodes is the number of points each worker owns on a hash ring. With
// 160 points a worker's share of the keys deviates from the mean by about 8%
// (the spread falls as 1/√vnodes; measured extremes: ±12% among 4 workers,
// -27%/+23% among 64), and a ring of 256 workers is 41k points, built in
// about 7 ms and searched in 16 steps.
const ringVnodes = 160

// ringCacheSize bounds the rings kept per policy. A ring is cached per set of
// candidate URLs; sets change only when workers join, leave or (when the
// caller filters by health) flap, so a handful covers the sets in use.
const ringCacheSize = 8

// ring is a consistent-hash ring with virtual nodes. It is keyed by worker
// URL, never by health: a worker that goes unhealthy keeps its points, lookups
// walk past it, and its keys come back when it recovers. Adding a worker to N
// takes about 1/(N+1) of the keys, all of them from the others to the new one;
// removing one moves only the keys it owned. A ring is immutable once built.
type ring struct {
	hashes []uint64 // sorted point hashes
	owners []int32  // owners[i] indexes urls: the worker at point i
	urls   []string // distinct worker URLs, in the order given
	index  map[string]int
}

// newRing places vnodes points for each distinct URL. Point j of a worker is
// at xxhash(url + "#" + j), so a worker's points depend on its URL alone and
// the same set of URLs always builds the same ring.
func newRing(urls []string, vnodes int) *ring {
	r := &ring{index: make(map[string]int, len(urls))}
	for _, u := range urls {
		if _, dup := r.index[u]; !dup {
			r.index[u] = len(r.urls)
			r.urls = append(r.urls, u)
		}
	}
	type point struct {
		h     uint64
		owner int32
	}
	pts := make([]point, 0, len(r.urls)*vnodes)
	var buf []byte
	for i, u := range r.urls {
		for j := range vnodes {
			buf = strconv.AppendInt(append(append(buf[:0], u...), '#'), int64(j), 10)
			pts = append(pts, point{xxhash.Sum64(buf), int32(i)})
		}
	}
	// Ties (two points with one hash) are broken by URL so that the ring does
	// not depend on the order the URLs were given in.
	slices.SortFunc(pts, func(a, b point) int {
		if c := cmp.Compare(a.h, b.h); c != 0 {
			return c
		}
		return cmp.Compare(r.urls[a.owner], r.urls[b.owner])
	})
	r.hashes = make([]uint64, len(pts))
	r.owners = make([]int32, len(pts))
	for i, p := range pts {
		r.hashes[i], r.owners[i] = p.h, p.owner
	}
	return r
}

// walk yields the index (into r.urls) of each distinct worker in ring order,
// starting with the owner of h: the first point at or after h, wrapping
// around. Callers stop at the first worker they accept.
func (r *ring) walk(h uint64) iter.Seq[int] {
	return func(yield func(int) bool) {
		if len(r.hashes) == 0 {
			return
		}
		start, _ := slices.BinarySearch(r.hashes, h)
		owner := int(r.owners[start%len(r.hashes)])
		if !yield(owner) || len(r.urls) == 1 {
			return
		}
		// The owner was refused: walk on, yielding each other worker once.
		seen := make([]bool, len(r.urls))
		seen[owner] = true
		left := len(r.urls) - 1
		for k := 1; k < len(r.hashes); k++ {
			o := int(r.owners[(start+k)%len(r.hashes)])
			if seen[o] {
				continue
			}
			seen[o] = true
			if !yield(o) {
				return
			}
			if left--; left == 0 {
				return
			}
		}
	}
}

// owner returns the index of the worker owning h, or -1 on an empty ring.
func (r *ring) owner(h uint64) int {
	for o := range r.walk(h) {
		return o
	}
	return -1
}

// ringCache keeps the rings of recent candidate sets so that a ring is built
// once per set, not once per request.
type ringCache struct {
	vnodes int
	// last is the most recent view with the exact candidates it was bound
	// to: the common case, the same registry snapshot request after request,
	// costs one pointer comparison per worker.
	last  atomic.Pointer[boundView]
	mu    sync.Mutex
	rings map[uint64]*ring // by setKey
}

type boundView struct {
	candidates []workers.View
	v          ringView
}

func newRingCache(vnodes int) *ringCache {
	return &ringCache{vnodes: vnodes, rings: make(map[uint64]*ring)}
}

// ringView is a ring bound to one request's candidates: ws[i] is the
// candidate whose URL is r.urls[i].
type ringView struct {
	r  *ring
	ws []workers.View
}

// walk yields the candidates in ring order from the owner of h; see ring.walk.
func (v ringView) walk(h uint64) iter.Seq[workers.View] {
	return func(yield func(workers.View) bool) {
		for o := range v.r.walk(h) {
			if !yield(v.ws[o]) {
				return
			}
		}
	}
}

// view returns the ring of the candidates' URLs, building it on first use.
// The same candidates as last time (by identity, in order) reuse the last
// view. Otherwise identifying the set costs one hash per URL, and a cached
// ring is used only after checking that its URLs are exactly the candidates'.
func (c *ringCache) view(candidates []workers.View) ringView {
	if b := c.last.Load(); b != nil && slices.Equal(b.candidates, candidates) {
		return b.v
	}
	key := setKey(candidates)
	c.mu.Lock()
	r := c.rings[key]
	c.mu.Unlock()
	if r == nil || !r.matches(candidates) {
		urls := make([]string, len(candidates))
		for i, w := range candidates {
			urls[i] = w.URL()
		}
		r = newRing(urls, c.vnodes)
		c.mu.Lock()
		if len(c.rings) >= ringCacheSize {
			clear(c.rings)
		}
		c.rings[key] = r
		c.mu.Unlock()
	}
	ws := make([]workers.View, len(r.urls))
	for _, w := range candidates {
		ws[r.index[w.URL()]] = w
	}
	v := ringView{r: r, ws: ws}
	c.last.Store(&boundView{candidates: slices.Clone(candidates), v: v})
	return v
}

// forget drops the rings that include url, and the last view if it does:
// a removed worker's rings would otherwise stay until the cache fills.
func (c *ringCache) forget(url string) {
	if b := c.last.Load(); b != nil {
		if _, ok := b.v.r.index[url]; ok {
			c.last.CompareAndSwap(b, nil)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, r := range c.rings {
		if _, ok := r.index[url]; ok {
			delete(c.rings, k)
		}
	}
}

// cachedRings returns how many rings the cache holds, for tests.
func (c *ringCache) cachedRings() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.rings)
}

// matches reports whether the ring's URLs are exactly the candidates' URLs.
// Candidates with a repeated URL never match (the registry refuses them), so
// such a set merely costs a rebuild.
func (r *ring) matches(candidates []workers.View) bool {
	if len(r.urls) != len(candidates) {
		return false
	}
	for _, w := range candidates {
		if _, ok := r.index[w.URL()]; !ok {
			return false
		}
	}
	return true
}

// setKey identifies a set of URLs regardless of order: the sum of their
// hashes, each mixed so that sums of related hashes do not collide easily.
func setKey(candidates []workers.View) uint64 {
	var k uint64
	for _, w := range candidates {
		h := xxhash.Sum64String(w.URL())
		h ^= h >> 33
		h *= 0xff51afd7ed558ccd
		k += h ^ h>>29
	}
	return k + uint64(len(candidates))
}

// keyHash is where a routing key sits on the ring.
func keyHash(key string) uint64 { return xxhash.Sum64String(key) }

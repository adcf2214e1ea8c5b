// Package tree is the multi-tenant token radix tree that mirrors what each
// worker holds in its KV cache. One tree serves one model; each worker is a
// tenant. A node holds a run of whole pages of token ids and the list of
// tenants that hold it; a tenant's holdings are prefix-closed (holding a node
// implies holding all its ancestors), as an engine's prefix cache is.
//
// Everything is page-aligned because that is what an engine can reuse: inputs
// are cut to whole pages, edges split only at page boundaries, and matches
// count whole pages only.
//
// Budget: "stored tokens" count each node's tokens once per tenant holding it,
// so Stats.Tokens is the sum of the tenants' holdings (what the workers hold
// between them) and it never exceeds Config.MaxTokens: an insert that would
// take it over evicts before it returns (see evict.go). Since every
// node has at least one holder, the sum also bounds the tokens the tree stores
// (Stats.UniqueTokens), so MaxTokens bounds the tree's memory too.
//
// Two sources say what a tenant holds. Routing decisions insert
// speculative holdings (the engine will hold this prefix in a moment), so a
// burst of requests for a new prefix stays together before the engine's KV
// event arrives; they expire unless confirmed (ExpireSpeculative). KV events
// insert confirmed holdings (InsertConfirmed): the engine said it holds them.
// Confirmed holdings are prefix-closed too, so a confirmed node's ancestors
// are confirmed and a speculative node's descendants are speculative.
//
// Locking: one RWMutex. Match reads under the read lock; MatchInsert, Insert
// and Trim write under the write lock and touch only the prompt's path, so
// their cost does not grow with the tree. Evict and RemoveTenant touch much of
// the tree, so they work in slices of at most ~holdSlice, ended after
// ~minSlice when a selection waits, and release the lock between slices:
// routing waits on them for about minSlice, unless the kernel deschedules
// the thread holding the lock.
package tree

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Config configures a Tree.
type Config struct {
	// PageSize is the engine's tokens per KV page; edges split only at page
	// boundaries. 0 means 16.
	PageSize int
	// MaxTokens is the budget in stored tokens (each node counted once per
	// tenant holding it). It holds after every insert: one that crosses it
	// evicts, in the eviction order, until the tree is within it again,
	// at the cost of what it evicts (see frontier.go). 0 means unbounded.
	MaxTokens int
	// Policy is the eviction order: "lru" (default), "lfu", "fifo", "mru",
	// "filo" or "priority" (lowest priority first, then least recently used).
	Policy string
}

// Eviction orders. Each (node, tenant) pair keeps one tick and one aux value;
// which ones they are depends on the order, so a holder stays 16 bytes.
type order uint8

const (
	orderLRU      order = iota // tick = last access
	orderLFU                   // aux = accesses, tick = last access
	orderFIFO                  // tick = when the tenant got the node
	orderMRU                   // tick = last access, evicted newest first
	orderFILO                  // tick = when the tenant got the node, newest first
	orderPriority              // aux = highest priority seen, tick = last access
)

func parseOrder(s string) (order, error) {
	switch strings.ToLower(s) {
	case "", "lru":
		return orderLRU, nil
	case "lfu":
		return orderLFU, nil
	case "fifo":
		return orderFIFO, nil
	case "mru":
		return orderMRU, nil
	case "filo":
		return orderFILO, nil
	case "priority":
		return orderPriority, nil
	}
	return 0, fmt.Errorf("tree: unknown eviction policy %q (want lru, lfu, fifo, mru, filo or priority)", s)
}

// holder records that a tenant holds a node, with what eviction needs. word
// is the tenant id with confirmedBit set for a confirmed holding: a flag of
// its own would grow the holder from 16 bytes to 24, and holders are most
// of a large tree's memory after the tokens.
type holder struct {
	word uint32
	aux  int32
	tick uint64
}

// confirmedBit marks a holding an engine's KV event confirmed. Tenant ids
// are indices into Tree.tenants and freed ids are reused, so an id reaches
// this bit only with 2^31 tenants in the tree at once (tens of gigabytes of
// tenant records alone); intern refuses that anyway.
const confirmedBit = 1 << 31

func (h holder) id() uint32      { return h.word &^ confirmedBit }
func (h holder) confirmed() bool { return h.word&confirmedBit != 0 }

// kid is a child edge, keyed by a hash of the child's first page so a
// lookup is a binary search without touching the child. Keying by the first
// token alone made siblings that share it (every prompt that continues a
// shared prefix with the same token, a chat template's turn header say, and
// then differs within the page) a run compared page by page on every
// lookup: a cost that grew with the prompts the tree had seen. Children
// whose pages collide sit next to each other and are told apart by their
// tokens.
type kid struct {
	key uint64
	n   *node
}

// key hashes a page for kid with the tree's seed. Seeded per tree, so a
// client cannot craft prompts whose pages collide; a collision would only
// cost one more comparison of tokens.
//
// The page is hashed as one string through maphash.Comparable, which hands
// the whole page to the runtime's hash in one call (about 60 ns for a
// 512-token page); maphash.Bytes and String feed it 128 bytes at a time
// (about 250 ns), and a descent hashes the first page of every node on the
// prompt's path. Those calls chain their state, so where the prompt is not
// in the CPU's caches each waited for the last one's miss: the lookup of a
// long prompt out of cache took 1.65 times what reading its tokens costs,
// 1.2 times with one call (BenchmarkMooncakeLookupLong, cold against
// floor). The string aliases the page only while it is hashed.
func (t *Tree) key(page []uint32) uint64 {
	if len(page) == 0 {
		return maphash.Comparable(t.seed, "")
	}
	return maphash.Comparable(t.seed, unsafe.String((*byte)(unsafe.Pointer(&page[0])), 4*len(page)))
}

// node is one edge of the radix tree: whole pages of tokens, children told
// apart by their first page's key (kids.go), and the tenants holding it. A
// deleted node has nil tokens.
type node struct {
	tokens []uint32
	// keys points to the count of whole chunks of tokens, from the first
	// token on, followed by their keys (chunks.go; node.chunks reads
	// them): descents compare keys instead of tokens. Nil if tokens hold
	// no whole chunk. A pointer rather than a slice keeps a node in the
	// allocator's 96-byte class: one-page nodes are most of some trees.
	keys    *uint64
	parent  *node
	kids    []kid
	holders []holder
	// wide indexes kids by key once they are many (kids.go); nil while
	// kids are few and sorted by key.
	wide *kidIndex
}

func (n *node) deleted() bool { return n.tokens == nil }

func (n *node) holderIndex(id uint32) int {
	for i := range n.holders {
		if n.holders[i].word&^confirmedBit == id {
			return i
		}
	}
	return -1
}

// leafFor reports whether no child of n is held by tenant id: (n, id) is then
// on the eviction frontier.
func (n *node) leafFor(id uint32) bool {
	for _, k := range n.kids {
		if k.n.holderIndex(id) >= 0 {
			return false
		}
	}
	return true
}

// pageCheck is how many tokens of a child's first page child compares,
// beside the page's key. Children are told apart by their keys, 64-bit
// hashes keyed per tree (chunks.go says why equal keys are taken as equal
// contents); the tokens only guard against a collision. Comparing a whole
// page read 2 KB of cold memory per node at 512-token pages: 5-29% of the
// indexer benchmark's lookup p99 on the conversation trace (BENCHMARKS.md,
// "The first page's tokens"). A page of 16 tokens or fewer, kvgate's
// default, is still compared whole.
const pageCheck = 16

// child returns the child whose first page is page, key being its hash
// (Tree.key), or nil.
func (n *node) child(key uint64, page []uint32) *node {
	k := min(len(page), pageCheck)
	if w := n.wide; w != nil {
		if i, ok := w.at[key]; ok {
			if c := n.kids[i].n; equal(c.tokens[:k], page[:k]) {
				return c
			}
		}
		for i := 0; w.dups > 0 && i < len(n.kids); i++ {
			if c := n.kids[i].n; n.kids[i].key == key && equal(c.tokens[:k], page[:k]) {
				return c
			}
		}
		return nil
	}
	for i := n.kidIndex(key); i < len(n.kids) && n.kids[i].key == key; i++ {
		if c := n.kids[i].n; equal(c.tokens[:k], page[:k]) {
			return c
		}
	}
	return nil
}

// tenant is an interned tenant name. Ids are small so holders stay small and
// matches accumulate in a slice instead of a map.
type tenant struct {
	name      string
	tokens    int // stored tokens held (0 once removed)
	confirmed int // the part of tokens held confirmed
	limit     int // most stored tokens the tenant may hold, 0 for no limit
	refs      int // holder entries naming this id, live or not
	live      bool
}

// lockSelection takes mu for a selection (or another short write), counted
// in waiting while it waits, so that Evict and RemoveTenant step aside.
func (t *Tree) lockSelection() {
	t.waiting.Add(1)
	t.mu.Lock()
	t.waiting.Add(-1)
}

// rlockSelection is lockSelection for a read.
func (t *Tree) rlockSelection() {
	t.waiting.Add(1)
	t.mu.RLock()
	t.waiting.Add(-1)
}

// Tree is a multi-tenant token radix tree. It is safe for concurrent use.
type Tree struct {
	mu      sync.RWMutex
	evictMu sync.Mutex // one Evict at a time
	// waiting counts selections waiting for mu, so Evict and RemoveTenant
	// can step aside between slices until they got in: sync.Mutex lets the
	// unlocker barge back in, and would hand over only after 1 ms.
	waiting atomic.Int32

	pageSize  int
	chunk     int // tokens per chunk key (chunks.go)
	maxTokens int
	order     order
	seed      maphash.Seed // of key

	root      node
	ids       map[string]uint32
	bindings  uint64 // changes of ids, for Rosters to notice
	tenants   []tenant
	free      []uint32       // ids with no holders left, ready for reuse
	limits    map[string]int // SetTenantLimit's settings by name: they outlive ClearTenant
	nodes     int            // nodes except the root
	tokens    int            // stored tokens: sum of live tenants' tokens
	confirmed int            // the part of tokens held confirmed
	unique    int            // tokens in nodes, each node once
	clock     uint64         // logical time, one tick per insert

	// idx is the frontier index for inline eviction (frontier.go): made
	// with the tree if it has a budget, else with the first tenant limit.
	idx *frontierIndex

	scratch scratch   // for writers (under mu)
	pool    sync.Pool // *scratch for readers, and Extend
	ends    endRing   // where the latest inserts ended, for Extend

	// sweepPause, if set, runs between sweep's collect and remove phases
	// with the lock released, as if a slice ended there: tests use it to
	// let another writer in at exactly that point. Always nil outside tests.
	sweepPause func()
	// onSlice, if set, runs as each slice for which Evict or RemoveTenant
	// holds the lock begins (just after taking it) and ends (just before
	// releasing it): the eviction benchmark measures the slices. Always
	// nil outside tests.
	onSlice func(begin bool)
}

// New returns an empty tree.
func New(cfg Config) (*Tree, error) {
	if cfg.PageSize < 0 {
		return nil, fmt.Errorf("tree: page size %d is negative", cfg.PageSize)
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = 16
	}
	if cfg.MaxTokens < 0 {
		return nil, fmt.Errorf("tree: max tokens %d is negative", cfg.MaxTokens)
	}
	o, err := parseOrder(cfg.Policy)
	if err != nil {
		return nil, err
	}
	t := &Tree{pageSize: cfg.PageSize, chunk: chunkFor(cfg.PageSize), maxTokens: cfg.MaxTokens, order: o, ids: map[string]uint32{}, limits: map[string]int{},
		seed: maphash.MakeSeed()}
	t.pool.New = func() any { return new(scratch) }
	if cfg.MaxTokens > 0 {
		t.idx = newFrontierIndex(o)
	}
	return t, nil
}

// PageSize returns the tree's tokens per page.
func (t *Tree) PageSize() int { return t.pageSize }

// cut drops the partial last page: the engine cannot reuse it.
func (t *Tree) cut(ids []uint32) []uint32 { return ids[:len(ids)-len(ids)%t.pageSize] }

// equal compares two token runs as bytes, so the runtime's vectorised memequal
// does the work: comparing an 8K-token prompt element by element would cost
// several microseconds of the selection budget.
func equal(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 {
		return true
	}
	return bytes.Equal(unsafe.Slice((*byte)(unsafe.Pointer(&a[0])), 4*len(a)),
		unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), 4*len(b)))
}

// commonPrefix returns the length in whole pages (in tokens) of the common
// prefix of a and b: first in large equal blocks, then token by token.
func commonPrefix(a, b []uint32, pageSize int) int {
	m := min(len(a), len(b))
	a, b = a[:m], b[:m]
	const block = 256
	i := 0
	for i+block <= m && equal(a[i:i+block], b[i:i+block]) {
		i += block
	}
	if i+block > m && equal(a[i:], b[i:]) {
		return m - m%pageSize
	}
	for i < m && a[i] == b[i] {
		i++
	}
	return i - i%pageSize
}

// intern returns the id of a tenant name, allocating one if needed.
func (t *Tree) intern(name string) uint32 {
	if id, ok := t.ids[name]; ok {
		return id
	}
	var id uint32
	tn := tenant{name: name, limit: t.limits[name], live: true}
	if n := len(t.free); n > 0 {
		id, t.free = t.free[n-1], t.free[:n-1]
		t.tenants[id] = tn
	} else {
		if len(t.tenants) >= confirmedBit {
			panic("tree: 2^31 tenants: the id would collide with the confirmed bit")
		}
		id = uint32(len(t.tenants))
		t.tenants = append(t.tenants, tn)
	}
	t.ids[name] = id
	t.bindings++
	return id
}

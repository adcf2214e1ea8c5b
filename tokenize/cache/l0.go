package cache

import (
	"hash/maphash"
	"strings"
	"sync"
)

// l0EntryOverhead is what one L0 entry costs beyond the allocations of its
// text and ids (see allocSize): the entry struct (key header, flag, slice
// header, two list pointers: 72 bytes, allocated in the 80-byte size class)
// and its map slot (24-byte key, 8-byte value, control byte, at a 7/8 load
// factor and with doubling headroom: up to ~80 bytes), rounded up. It is
// deliberately generous: the accounted size should not be below the real one.
const l0EntryOverhead = 192

// allocSize is what the allocator may really use for an n-byte object: Go's
// size classes waste at most 1/8, and small objects round up to 16 bytes.
func allocSize(n int) int64 {
	if n == 0 {
		return 0
	}
	return int64(max(16, n+n/8))
}

// shardSample is how many bytes at each end of a long text pick its shard.
const shardSample = 64

type l0Key struct {
	text string
	add  bool
}

type l0Entry struct {
	key        l0Key
	ids        []uint32
	prev, next *l0Entry
}

func (e *l0Entry) size() int64 { return l0Size(len(e.key.text), cap(e.ids)) }

// l0Size is the accounted size of an entry for a text of textLen bytes and
// n ids.
func l0Size(textLen, n int) int64 {
	return allocSize(textLen) + allocSize(4*n) + l0EntryOverhead
}

// l0 is the exact-match cache: (text, addSpecial) → ids, LRU within each of
// its shards. With n shards each holds about maxEntries/n entries and
// maxBytes/n bytes, so eviction is an approximation of a global LRU that is
// exact for n == 1.
type l0 struct {
	seed     maphash.Seed
	shards   []l0Shard
	maxEntry int64 // largest entry stored: MaxEntryBytes, at most a shard's budget
}

type l0Shard struct {
	mu       sync.Mutex
	m        map[l0Key]*l0Entry
	head     l0Entry // sentinel: head.next is the most recent, head.prev the least
	max      int
	maxBytes int64
	bytes    int64
	_        [64]byte // keep neighbouring shards' locks on separate cache lines
}

func newL0(maxEntries int, maxBytes, maxEntry int64, shards int) *l0 {
	shards = max(1, min(shards, maxEntries))
	perShard := maxBytes / int64(shards)
	c := &l0{seed: maphash.MakeSeed(), shards: make([]l0Shard, shards), maxEntry: min(maxEntry, perShard)}
	for i := range c.shards {
		s := &c.shards[i]
		s.m = make(map[l0Key]*l0Entry)
		s.head.next, s.head.prev = &s.head, &s.head
		s.maxBytes = perShard
		s.max = maxEntries / shards
		if i < maxEntries%shards {
			s.max++
		}
	}
	return c
}

func (c *l0) shard(text string) *l0Shard {
	if len(c.shards) == 1 {
		return &c.shards[0]
	}
	// The map hashes the whole text anyway; the shard only needs a spread,
	// so long texts are sampled at both ends (where prompts differ).
	h := uint64(len(text))
	if len(text) <= 2*shardSample {
		h ^= maphash.String(c.seed, text)
	} else {
		h ^= maphash.String(c.seed, text[:shardSample]) ^ 31*maphash.String(c.seed, text[len(text)-shardSample:])
	}
	return &c.shards[h%uint64(len(c.shards))]
}

// get returns a copy of the cached ids, which the caller owns.
func (c *l0) get(text string, add bool) ([]uint32, bool) {
	s := c.shard(text)
	s.mu.Lock()
	e, ok := s.m[l0Key{text, add}]
	if !ok {
		s.mu.Unlock()
		return nil, false
	}
	s.moveToFront(e)
	ids := e.ids // immutable once stored
	s.mu.Unlock()
	return append(make([]uint32, 0, len(ids)), ids...), true
}

// fits reports whether an entry for text with n ids is small enough to store.
func (c *l0) fits(text string, n int) bool {
	return l0Size(len(text), n) <= c.maxEntry
}

// put stores a private copy of ids under a private copy of text (so a text
// that is a slice of a larger buffer does not keep that buffer alive), unless
// the entry is larger than maxEntry; it then evicts the least recent entries
// until the shard is within both of its bounds.
func (c *l0) put(text string, add bool, ids []uint32) {
	if !c.fits(text, len(ids)) {
		return
	}
	s := c.shard(text)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[l0Key{text, add}]; ok {
		s.moveToFront(e)
		return
	}
	e := &l0Entry{
		key: l0Key{strings.Clone(text), add},
		ids: append(make([]uint32, 0, len(ids)), ids...),
	}
	s.m[e.key] = e
	s.pushFront(e)
	s.bytes += e.size()
	for len(s.m) > s.max || s.bytes > s.maxBytes {
		old := s.head.prev
		s.unlink(old)
		delete(s.m, old.key)
		s.bytes -= old.size()
	}
}

func (c *l0) stats() (entries int, bytes int64) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		entries += len(s.m)
		bytes += s.bytes
		s.mu.Unlock()
	}
	return entries, bytes
}

func (s *l0Shard) pushFront(e *l0Entry) {
	e.prev, e.next = &s.head, s.head.next
	s.head.next.prev = e
	s.head.next = e
}

func (s *l0Shard) unlink(e *l0Entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (s *l0Shard) moveToFront(e *l0Entry) {
	if s.head.next == e {
		return
	}
	s.unlink(e)
	s.pushFront(e)
}

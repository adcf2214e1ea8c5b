package tokenize

import (
	"hash/maphash"
	"strings"
	"sync"
)

// wordCache is a bounded, sharded map from pre-token to ids. A full shard is cleared
// rather than frozen, so a long-running server keeps caching its current traffic.
type wordCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
}

const (
	cacheShards   = 16
	cacheShardCap = 1024
)

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]uint32
}

func newWordCache() *wordCache {
	c := &wordCache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]uint32)
	}
	return c
}

func (c *wordCache) shard(k string) *cacheShard {
	return &c.shards[maphash.String(c.seed, k)%cacheShards]
}

func (c *wordCache) get(k string) ([]uint32, bool) {
	s := c.shard(k)
	s.mu.RLock()
	v, ok := s.m[k]
	s.mu.RUnlock()
	return v, ok
}

func (c *wordCache) put(k string, ids []uint32) {
	v := append([]uint32(nil), ids...)
	s := c.shard(k)
	s.mu.Lock()
	if len(s.m) >= cacheShardCap {
		clear(s.m)
	}
	s.m[strings.Clone(k)] = v
	s.mu.Unlock()
}

// resetCaches empties the per-word caches (benchmarks of cold encoding use it).
func (m *bpeModel) resetCaches() {
	for _, c := range []*wordCache{m.cache, m.rawCache} {
		if c != nil {
			c.reset()
		}
	}
}

// through appends the ids of word, from the cache when it holds them, else from encode
// (whose result is then cached); words longer than maxCachedWord bypass the cache.
func (c *wordCache) through(dst []uint32, word string, encode func([]uint32, string) []uint32) []uint32 {
	if word == "" {
		return dst
	}
	if len(word) > maxCachedWord {
		return encode(dst, word)
	}
	if ids, ok := c.get(word); ok {
		return append(dst, ids...)
	}
	n := len(dst)
	dst = encode(dst, word)
	c.put(word, dst[n:])
	return dst
}

// reset empties every shard.
func (c *wordCache) reset() {
	for i := range c.shards {
		c.shards[i].mu.Lock()
		clear(c.shards[i].m)
		c.shards[i].mu.Unlock()
	}
}

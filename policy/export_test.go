package policy

import "time"

// CachedRings returns how many rings a prefix_hash or consistent_hashing
// policy caches, -1 for other policies.
func CachedRings(p Policy) int {
	switch p := p.(type) {
	case *PrefixHash:
		return p.rings.cachedRings()
	case *ConsistentHashing:
		return p.rings.cachedRings()
	}
	return -1
}

// ExpireSpeculations runs cache_aware's speculative expiry as its loop would
// at now.
func ExpireSpeculations(c *CacheAware, now time.Time) { c.spec.expire(now, c.tree) }

// MirrorLookups returns how many times the KV event mirrors of worker (every
// rank) looked a block hash up in their block tables.
func MirrorLookups(c *CacheAware, worker string) int {
	c.eventMirror.mu.Lock()
	defer c.eventMirror.mu.Unlock()
	n := 0
	for k, rm := range c.eventMirror.mirrors {
		if k.worker == worker {
			rm.mu.Lock()
			n += rm.m.Lookups()
			rm.mu.Unlock()
		}
	}
	return n
}

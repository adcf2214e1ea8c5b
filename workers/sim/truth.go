package sim

import (
	"context"
	"log/slog"
	"time"
)

// evictionClock remembers when the engine evicted its latest pages, by
// block hash, so that a request's debug line can say how long before its
// arrival the first page it lacked left the cache: the truth that tells a
// router's stale view (the page left well before the request came, and the
// router's events had not caught up) from a race (it left while the request
// was on its way). Kept only while debug logging is on; bounded.
type evictionClock struct {
	at   map[int64]time.Time
	ring []int64
	next int
	full bool
}

// evictionClockPages bounds the pages remembered.
const evictionClockPages = 1 << 15

func (e *Engine) debugTruth() bool { return e.log.Enabled(context.Background(), slog.LevelDebug) }

// noteEvictedLocked records the removals among changes.
func (e *Engine) noteEvictedLocked(changes []cacheChange) {
	if !e.debugTruth() {
		return
	}
	c := &e.evictions
	if c.at == nil {
		c.at = make(map[int64]time.Time)
		c.ring = make([]int64, evictionClockPages)
	}
	now := time.Now()
	for _, ch := range changes {
		for _, h := range ch.removed {
			if c.full {
				delete(c.at, c.ring[c.next])
			}
			c.ring[c.next] = h
			c.at[h] = now
			c.next = (c.next + 1) % evictionClockPages
			c.full = c.full || c.next == 0
		}
	}
}

// evictedAgoLocked is how long ago the page of prompt right after its
// cached prefix was evicted, or -1 when it was not evicted lately.
func (e *Engine) evictedAgoLocked(prompt []uint32) time.Duration {
	if e.evictions.at == nil {
		return -1
	}
	c := e.cache
	path := c.matchPath(prompt)
	lo := len(path) * c.pageSize
	if lo+c.pageSize > len(prompt) {
		return -1
	}
	parent := c.root.hash
	if len(path) > 0 {
		parent = path[len(path)-1].hash
	}
	at, ok := e.evictions.at[blockHash(parent, prompt[lo:lo+c.pageSize])]
	if !ok {
		return -1
	}
	return time.Since(at)
}

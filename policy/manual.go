package policy

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvgate/kvgate/workers"
)

// AssignmentModes are the ways manual can place a routing key it has not seen.
var AssignmentModes = []string{"random", "min_load", "min_group"}

// CheckAssignmentMode returns an error naming the valid modes unless mode is
// one of AssignmentModes.
func CheckAssignmentMode(mode string) error {
	if slices.Contains(AssignmentModes, mode) {
		return nil
	}
	return fmt.Errorf("unknown assignment mode %q (want %s)", mode, strings.Join(AssignmentModes, ", "))
}

// Manual pins each routing key (x-routing-key) to a worker the first time it
// is seen and keeps it there: unlike a hash ring, adding workers never moves
// a key, so a session's context stays where it was built. A new key's worker
// is chosen by AssignmentMode: random; min_load, the least loaded; min_group,
// the worker that is home to the fewest keys (ties drawn at random). Branches:
// "assigned" (new key), "sticky" (home worker), "failover", "random" (no key:
// the request has no session to keep together, so it goes to a random
// worker whatever the mode).
//
// Each key remembers at most two workers: its home (primary) and a backup.
// While the home is unhealthy the key goes to the backup, choosing a backup by
// the assignment mode if it has none or the backup is unhealthy too; when the
// home recovers the key goes home again. The home is never reassigned, so a
// key whose home has been removed for good keeps failing over to its backup.
//
// Memory is bounded in bytes at all times, whatever clients send: a key is
// remembered by its 64-bit xxhash, never by its value, so an entry costs
// about 130 bytes however long the key, and at most MaxKeys entries are kept
// (the least recently used goes when a new key arrives at the cap). Two keys
// with the same hash share a worker, which for 64-bit hashes of a million
// keys happens with odds of about one in 30 million, and only costs a
// session its cache locality. Run also drops keys idle for longer than
// MaxIdle every EvictionInterval. Keys are kept in order of last use, so
// expiry and the cap pop stale keys off one end without scanning the live
// ones; expiry works a batch at a time and never holds up selection for
// long. Selection holds one mutex for a map lookup and a scan of the
// candidates.
type Manual struct {
	mode     string
	maxIdle  time.Duration
	interval time.Duration
	maxKeys  int
	now      func() time.Time
	intn     Intn

	mu     sync.Mutex
	keys   map[uint64]*manualKey // by keyHash
	groups map[string]int        // URL → keys whose home it is (min_group)
	lru    manualKey             // sentinel of the keys in order of use: lru.next is the stalest
}

type manualKey struct {
	key          uint64 // keyHash of the routing key
	home, backup string // worker URLs; backup is "" until a failover needs one
	lastUsed     time.Time
	prev, next   *manualKey
}

// touch marks e used now, moving it to the fresh end of the list. m.mu is held.
func (m *Manual) touch(e *manualKey) {
	e.lastUsed = m.now()
	if e.next != nil { // linked: unlink first
		e.prev.next, e.next.prev = e.next, e.prev
	}
	e.prev, e.next = m.lru.prev, &m.lru
	m.lru.prev.next = e
	m.lru.prev = e
}

// NewManual returns a manual policy configured by o.Manual, or its
// validation error.
func NewManual(o Options) (*Manual, error) {
	c := o.Manual
	if err := c.Validate(); err != nil {
		return nil, err
	}
	m := &Manual{
		mode:     c.AssignmentMode,
		maxIdle:  c.MaxIdle,
		interval: c.EvictionInterval,
		maxKeys:  c.MaxKeys,
		now:      o.Now,
		intn:     orDefault(o.Intn),
		keys:     make(map[uint64]*manualKey),
		groups:   make(map[string]int),
	}
	m.lru.prev, m.lru.next = &m.lru, &m.lru
	if m.now == nil {
		m.now = time.Now
	}
	return m, nil
}

func (*Manual) Name() string { return "manual" }

// Select routes the request's routing key to its pinned worker; see Manual.
func (m *Manual) Select(_ context.Context, req *Request, candidates []workers.View) (Decision, error) {
	ws := healthy(req, candidates)
	if len(ws) == 0 {
		return Decision{}, ErrNoHealthyWorker
	}
	if req.RoutingKey == "" {
		m.mu.Lock()
		defer m.mu.Unlock()
		return Decision{Worker: ws[m.intn(len(ws))].Worker(), Branch: "random", Reason: "manual: no routing key, random"}, nil
	}
	key := keyHash(req.RoutingKey) // hashed outside the lock: keys may be long
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.keys[key]
	if e == nil {
		w := m.assign(ws)
		if !req.DryRun {
			if len(m.keys) >= m.maxKeys {
				m.drop(m.lru.next)
			}
			e = &manualKey{key: key, home: w.URL()}
			m.keys[key] = e
			m.groups[e.home]++
			m.touch(e)
		}
		return Decision{Worker: w.Worker(), Branch: "assigned", Reason: "manual: new routing key, " + m.mode}, nil
	}
	if !req.DryRun {
		m.touch(e)
	}
	if w := byURL(ws, e.home); !w.IsZero() {
		return Decision{Worker: w.Worker(), Branch: "sticky", Reason: "manual: routing key's home worker"}, nil
	}
	if w := byURL(ws, e.backup); !w.IsZero() {
		return Decision{Worker: w.Worker(), Branch: "failover", Reason: fmt.Sprintf("manual: home %s unhealthy, backup", e.home)}, nil
	}
	w := m.assign(ws)
	if !req.DryRun {
		e.backup = w.URL()
	}
	return Decision{Worker: w.Worker(), Branch: "failover",
		Reason: fmt.Sprintf("manual: home %s unhealthy, new backup by %s", e.home, m.mode)}, nil
}

// assign chooses a worker for a key by the assignment mode. m.mu is held.
func (m *Manual) assign(ws []workers.View) workers.View {
	var score func(workers.View) int
	switch m.mode {
	case "min_load":
		score = workers.View.Load
	case "min_group":
		score = func(w workers.View) int { return m.groups[w.URL()] }
	default:
		return ws[m.intn(len(ws))]
	}
	var best []workers.View
	bestScore := 0
	for _, w := range ws {
		switch s := score(w); {
		case len(best) == 0 || s < bestScore:
			best, bestScore = append(best[:0], w), s
		case s == bestScore:
			best = append(best, w)
		}
	}
	if len(best) == 1 {
		return best[0]
	}
	return best[m.intn(len(best))]
}

func byURL(ws []workers.View, url string) workers.View {
	if url == "" {
		return workers.View{}
	}
	for _, w := range ws {
		if w.URL() == url {
			return w
		}
	}
	return workers.View{}
}

// evictBatch bounds the keys EvictIdle drops per hold of the lock.
const evictBatch = 1024

// EvictIdle forgets the keys unused for longer than MaxIdle and returns how
// many it dropped. Run calls it every EvictionInterval.
func (m *Manual) EvictIdle() int {
	n := 0
	for {
		k, more := m.evictSome(evictBatch)
		n += k
		if !more {
			return n
		}
	}
}

// evictSome drops up to limit idle keys, stalest first, and reports whether
// more may remain.
func (m *Manual) evictSome(limit int) (int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cutoff := m.now().Add(-m.maxIdle)
	n := 0
	for e := m.lru.next; e != &m.lru && e.lastUsed.Before(cutoff); e = m.lru.next {
		if n == limit {
			return n, true
		}
		m.drop(e)
		n++
	}
	return n, false
}

// drop forgets key entry e. m.mu is held.
func (m *Manual) drop(e *manualKey) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	delete(m.keys, e.key)
	if m.groups[e.home]--; m.groups[e.home] <= 0 {
		delete(m.groups, e.home)
	}
}

// Forget drops what manual keeps about a worker removed from the fleet: the
// keys whose home it was are forgotten (they are placed afresh on next use,
// as their home is gone for good) and keys using it as backup lose the
// backup. It scans every key under the lock, about 10 ms per million keys,
// once per worker removal.
func (m *Manual) Forget(url string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.keys {
		switch url {
		case e.home:
			m.drop(e)
		case e.backup:
			e.backup = ""
		}
	}
	delete(m.groups, url)
}

// Keys returns how many routing keys are pinned.
func (m *Manual) Keys() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.keys)
}

// Run expires idle keys every EvictionInterval until ctx ends.
func (m *Manual) Run(ctx context.Context) {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n := m.EvictIdle(); n > 0 {
				slog.DebugContext(ctx, "manual: evicted idle routing keys", "evicted", n, "remaining", m.Keys())
			}
		}
	}
}

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
// one of AssignmentModes or empty (the default, random).
func CheckAssignmentMode(mode string) error {
	if mode == "" || slices.Contains(AssignmentModes, mode) {
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
// Memory is one entry per key used within MaxIdle (about 120 bytes plus the
// key): Run drops keys idle for longer every EvictionInterval. There is no
// other cap; a client minting a key per request grows the map for MaxIdle.
// Keys are kept in order of last use, so expiry pops stale keys off one end
// without scanning the live ones, a batch at a time, and never holds up
// selection for long. Selection holds one mutex for a map lookup and a scan
// of the candidates.
type Manual struct {
	mode     string
	maxIdle  time.Duration
	interval time.Duration
	now      func() time.Time
	intn     Intn

	mu     sync.Mutex
	keys   map[string]*manualKey
	groups map[string]int // URL → keys whose home it is (min_group)
	lru    manualKey      // sentinel of the keys in order of use: lru.next is the stalest
}

type manualKey struct {
	key          string
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

// manualEvictionInterval is the seed's default for manual, half of the tree
// eviction default that Options.EvictionInterval otherwise documents.
const manualEvictionInterval = 60 * time.Second

// NewManual returns a manual policy. Zero options take the seed's defaults:
// random assignment, 14400 s idle expiry checked every 60 s. An unknown
// AssignmentMode is treated as random; CheckAssignmentMode rejects it first.
func NewManual(o Options) *Manual {
	m := &Manual{
		mode:     o.AssignmentMode,
		maxIdle:  o.MaxIdle,
		interval: o.EvictionInterval,
		now:      o.Now,
		intn:     orDefault(o.Intn),
		keys:     make(map[string]*manualKey),
		groups:   make(map[string]int),
	}
	m.lru.prev, m.lru.next = &m.lru, &m.lru
	if CheckAssignmentMode(m.mode) != nil || m.mode == "" {
		m.mode = "random"
	}
	if m.maxIdle <= 0 {
		m.maxIdle = DefaultOptions().MaxIdle
	}
	if m.interval <= 0 {
		m.interval = manualEvictionInterval
	}
	if m.now == nil {
		m.now = time.Now
	}
	return m
}

func (*Manual) Name() string { return "manual" }

// Select routes the request's routing key to its pinned worker; see Manual.
func (m *Manual) Select(_ context.Context, req *Request, candidates []*workers.Worker) (Decision, error) {
	ws := healthy(candidates)
	if len(ws) == 0 {
		return Decision{}, ErrNoHealthyWorker
	}
	key := req.RoutingKey
	m.mu.Lock()
	defer m.mu.Unlock()
	if key == "" {
		return Decision{Worker: ws[m.intn(len(ws))], Branch: "random", Reason: "manual: no routing key, random"}, nil
	}
	e := m.keys[key]
	if e == nil {
		w := m.assign(ws)
		if !req.DryRun {
			e = &manualKey{key: key, home: w.URL()}
			m.keys[key] = e
			m.groups[e.home]++
			m.touch(e)
		}
		return Decision{Worker: w, Branch: "assigned", Reason: "manual: new routing key, " + m.mode}, nil
	}
	if !req.DryRun {
		m.touch(e)
	}
	if w := byURL(ws, e.home); w != nil {
		return Decision{Worker: w, Branch: "sticky", Reason: "manual: routing key's home worker"}, nil
	}
	if w := byURL(ws, e.backup); w != nil {
		return Decision{Worker: w, Branch: "failover", Reason: fmt.Sprintf("manual: home %s unhealthy, backup", e.home)}, nil
	}
	w := m.assign(ws)
	if !req.DryRun {
		e.backup = w.URL()
	}
	return Decision{Worker: w, Branch: "failover",
		Reason: fmt.Sprintf("manual: home %s unhealthy, new backup by %s", e.home, m.mode)}, nil
}

// assign chooses a worker for a key by the assignment mode. m.mu is held.
func (m *Manual) assign(ws []*workers.Worker) *workers.Worker {
	var score func(*workers.Worker) int
	switch m.mode {
	case "min_load":
		score = (*workers.Worker).Load
	case "min_group":
		score = func(w *workers.Worker) int { return m.groups[w.URL()] }
	default:
		return ws[m.intn(len(ws))]
	}
	var best []*workers.Worker
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

func byURL(ws []*workers.Worker, url string) *workers.Worker {
	if url == "" {
		return nil
	}
	for _, w := range ws {
		if w.URL() == url {
			return w
		}
	}
	return nil
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
		e.prev.next, e.next.prev = e.next, e.prev
		delete(m.keys, e.key)
		if m.groups[e.home]--; m.groups[e.home] <= 0 {
			delete(m.groups, e.home)
		}
		n++
	}
	return n, false
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

package policy

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/tree"
)

// Speculative entries: when cache_aware sends a prompt to a worker, it
// inserts the prompt for that worker at once, before the engine has stored
// anything, so that a burst of requests sharing a new prefix stays together.
// For a worker whose KV events are flowing, the engine's stored events then
// confirm the pages it really cached, and what is still unconfirmed once the
// request is over (plus SpeculativeTTL, for events still on their way) the
// engine never stored: it expires. Workers without events keep their
// speculative entries, corrected from the cached tokens engines report.

const (
	// speculationSweep is how often due speculations are expired.
	speculationSweep = 100 * time.Millisecond
	// speculationTokens bounds the prompts waiting to expire, in tokens
	// (64 MiB of token ids). Beyond it the oldest expire at once: memory
	// stays bounded whatever the request rate.
	speculationTokens = 16 << 20
)

// treeIndex is cache_aware's tree seen as an eventMirror's index; the
// removals it applies are remembered in removed.
type treeIndex struct {
	t       *tree.Tree
	removed *removals
}

func (x treeIndex) confirm(worker string, path []uint32) { x.t.InsertConfirmed(path, worker) }
func (x treeIndex) drop(worker string, path []uint32, pages int) {
	x.removed.removed(worker, path, pages)
	x.t.Trim(path, worker, len(path)-pages*x.t.PageSize())
}
func (x treeIndex) clear(worker string) { x.t.ClearTenant(worker) }

// speculation is one decision's speculative insert, due to expire: the
// prompt, and the reply Extend inserted below it, if any.
type speculation struct {
	ids    []uint32
	reply  []uint32
	worker string
	tick   uint64
	due    time.Time
}

// speculations is a FIFO of speculative inserts waiting to expire. Every
// entry waits the same TTL from the request's end, so the queue is ordered
// by due time.
type speculations struct {
	ttl       time.Duration
	maxTokens int

	mu     sync.Mutex
	q      []speculation
	head   int
	tokens int

	expired atomic.Uint64 // inserts that expired with pages still unconfirmed
}

func newSpeculations(ttl time.Duration, maxTokens int) *speculations {
	return &speculations{ttl: ttl, maxTokens: maxTokens}
}

// add queues the insert of ids followed by reply for worker at tick, for
// expiry ttl after now. The queue keeps references to ids and reply, which
// the request no longer changes.
func (s *speculations) add(ids, reply []uint32, worker string, tick uint64, now time.Time) {
	s.mu.Lock()
	s.q = append(s.q, speculation{ids: ids, reply: reply, worker: worker, tick: tick, due: now.Add(s.ttl)})
	s.tokens += len(ids) + len(reply)
	s.mu.Unlock()
}

// expire drops the speculative pages of every insert due by now (and of the
// oldest, due or not, while the queue holds more than maxTokens) that no
// event has confirmed and no later decision has touched since.
func (s *speculations) expire(now time.Time, t *tree.Tree) {
	for {
		s.mu.Lock()
		if s.head == len(s.q) || !s.q[s.head].due.Before(now) && s.tokens <= s.maxTokens {
			// Compact once the consumed head dominates.
			if s.head > 0 && s.head >= len(s.q)/2 {
				n := copy(s.q, s.q[s.head:])
				clear(s.q[n:])
				s.q, s.head = s.q[:n], 0
			}
			s.mu.Unlock()
			return
		}
		sp := s.q[s.head]
		s.q[s.head] = speculation{}
		s.head++
		s.tokens -= len(sp.ids) + len(sp.reply)
		s.mu.Unlock()
		if t.ExpireSpeculativeReply(sp.ids, sp.reply, sp.worker, sp.tick) > 0 {
			s.expired.Add(1)
		}
	}
}

// Expired is the number of speculative inserts that expired unconfirmed.
func (s *speculations) Expired() uint64 { return s.expired.Load() }

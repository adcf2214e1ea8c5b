// Package waitq holds the requests that wait in the router until an engine
// (or the router's own concurrency limit) has room for them: late binding.
//
// A request committed to an engine that is already full waits blind in that
// engine's queue, behind whatever the engine took first, and its placement
// was decided with load and cache state that will be stale by the time it
// runs. Waiting here instead keeps the order a client can reason about
// (priority class, then deadline, then arrival) and lets the placement be
// made when the request can actually run.
//
// The queue knows nothing of engines or gRPC: the caller says what "room"
// means with a function, and tells the queue when room may have freed.
package waitq

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kvgate/kvgate/fault"
)

// Ticket is what orders a waiting request.
type Ticket struct {
	// Model names the queue the request waits in: requests for different
	// models never wait behind each other.
	Model string
	// Priority is the request's class; lower is served first (as vLLM's
	// request priority).
	Priority int
	// Deadline is when the client stops waiting; the zero time (none)
	// is served after every request that has one, within a class.
	Deadline time.Time
	// Arrived orders requests of the same class and deadline.
	Arrived time.Time
}

// Config bounds the queue.
type Config struct {
	// Size is how many requests may wait at once, over all models; 0: none
	// wait (a request without room is refused at once).
	Size int
	// Timeout is how long a request may wait.
	Timeout time.Duration
	// Changed, when set, is told the number of requests waiting for a
	// model each time it changes (a gauge). It is called with the queue's
	// lock held and must not call back into the queue.
	Changed func(model string, waiting int)
}

// Queue is a bounded set of per-model lanes of waiting requests. Only the
// head of a lane is ever offered room, so a request never overtakes one
// ahead of it in order; when the head leaves (bound, cancelled, timed out)
// the next one is woken, so nobody is left asleep behind a gone waiter.
type Queue struct {
	cfg     Config
	mu      sync.Mutex
	lanes   map[string]*lane // only lanes with waiters: bounded by Size
	waiting int
	seq     uint64
}

// New returns an empty queue.
func New(cfg Config) *Queue {
	return &Queue{cfg: cfg, lanes: map[string]*lane{}}
}

// Wait returns nil once room() said yes for this request: at once when
// nobody for its model waits and room() does, else when it is at the head of
// its lane, woken (Wake), and room() does. room is called with the queue's
// lock held, and only ever from Wait's own goroutine; it may take the place
// it reports (a true answer binds the request); it must be quick and must
// not call the queue.
//
// It fails with a fault.Busy naming --queue-size when the queue is full, one
// naming --queue-timeout-secs when the request waited Timeout, or ctx's
// cause when ctx ends first.
func (q *Queue) Wait(ctx context.Context, t Ticket, room func() bool) error {
	q.mu.Lock()
	l := q.lanes[t.Model]
	if l == nil || len(l.h) == 0 {
		if room() {
			q.mu.Unlock()
			return nil
		}
	}
	if q.waiting >= q.cfg.Size {
		q.mu.Unlock()
		return fault.Newf(fault.Busy, "%w; retry later", fullError(q.cfg.Size))
	}
	if l == nil {
		l = &lane{}
		q.lanes[t.Model] = l
	}
	q.seq++
	w := &waiter{t: t, seq: q.seq, wake: make(chan struct{}, 1)}
	heap.Push(&l.h, w)
	q.waiting++
	q.changed(t.Model, l)
	if l.h[0] == w && room() { // it went straight to the head of a lane that was waiting
		q.leave(t.Model, l, w)
		q.mu.Unlock()
		return nil
	}
	q.mu.Unlock()

	timer := time.NewTimer(q.cfg.Timeout)
	defer timer.Stop()
	for {
		select {
		case <-w.wake:
			q.mu.Lock()
			if l.h[0] == w && room() {
				q.leave(t.Model, l, w)
				q.mu.Unlock()
				return nil
			}
			q.mu.Unlock()
		case <-timer.C:
			q.abandon(t.Model, l, w)
			return fault.Newf(fault.Busy, "%w; retry later", timeoutError(q.cfg.Timeout))
		case <-ctx.Done():
			q.abandon(t.Model, l, w)
			return context.Cause(ctx)
		}
	}
}

// fullError is a request refused because the queue is full.
type fullError int

func (e fullError) Error() string {
	return fmt.Sprintf("no engine or router place is free and the router's wait queue of %d is full (--queue-size)", int(e))
}

// timeoutError is a request that waited the whole timeout.
type timeoutError time.Duration

func (e timeoutError) Error() string {
	return fmt.Sprintf("no engine or router place freed within %v in the router's wait queue (--queue-timeout-secs)", time.Duration(e))
}

// Refused reports whether err is Wait's answer to a full queue.
func Refused(err error) bool {
	var e fullError
	return errors.As(err, &e)
}

// TimedOut reports whether err is Wait's answer to a request that waited
// the whole timeout.
func TimedOut(err error) bool {
	var e timeoutError
	return errors.As(err, &e)
}

// Wake tells the head of model's lane that room may have freed.
func (q *Queue) Wake(model string) {
	q.mu.Lock()
	if l := q.lanes[model]; l != nil {
		l.nudge()
	}
	q.mu.Unlock()
}

// WakeAll wakes the head of every lane: a place under a limit shared by all
// models freed.
func (q *Queue) WakeAll() {
	q.mu.Lock()
	for _, l := range q.lanes {
		l.nudge()
	}
	q.mu.Unlock()
}

// Waiting is how many requests wait, over all models.
func (q *Queue) Waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.waiting
}

// WaitingFor is how many requests wait for model.
func (q *Queue) WaitingFor(model string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if l := q.lanes[model]; l != nil {
		return len(l.h)
	}
	return 0
}

// abandon removes a waiter that gives up.
func (q *Queue) abandon(model string, l *lane, w *waiter) {
	q.mu.Lock()
	q.leave(model, l, w)
	q.mu.Unlock()
}

// leave removes w from its lane and wakes the lane's new head, which may
// have room now (the place w did not take, or one that freed while w held
// the head). Called with the lock held.
func (q *Queue) leave(model string, l *lane, w *waiter) {
	heap.Remove(&l.h, w.idx)
	q.waiting--
	q.changed(model, l)
	if len(l.h) == 0 {
		delete(q.lanes, model)
		return
	}
	l.nudge()
}

func (q *Queue) changed(model string, l *lane) {
	if q.cfg.Changed != nil {
		q.cfg.Changed(model, len(l.h))
	}
}

// lane is one model's waiters.
type lane struct{ h waiters }

// nudge wakes the head; a wake it has not consumed yet stands for this one.
func (l *lane) nudge() {
	if len(l.h) == 0 {
		return
	}
	select {
	case l.h[0].wake <- struct{}{}:
	default:
	}
}

// waiter is one waiting request.
type waiter struct {
	t    Ticket
	seq  uint64 // breaks ties of equal tickets by arrival in the queue
	idx  int    // position in the heap
	wake chan struct{}
}

// before reports whether a is served before b.
func before(a, b *waiter) bool {
	if a.t.Priority != b.t.Priority {
		return a.t.Priority < b.t.Priority
	}
	ad, bd := a.t.Deadline, b.t.Deadline
	if ad.IsZero() != bd.IsZero() {
		return !ad.IsZero()
	}
	if !ad.Equal(bd) {
		return ad.Before(bd)
	}
	if !a.t.Arrived.Equal(b.t.Arrived) {
		return a.t.Arrived.Before(b.t.Arrived)
	}
	return a.seq < b.seq
}

// waiters is a heap of waiters, first served at 0.
type waiters []*waiter

func (h waiters) Len() int           { return len(h) }
func (h waiters) Less(i, j int) bool { return before(h[i], h[j]) }
func (h waiters) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *waiters) Push(x any) {
	w := x.(*waiter)
	w.idx = len(*h)
	*h = append(*h, w)
}
func (h *waiters) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return w
}

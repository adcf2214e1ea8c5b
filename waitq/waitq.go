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
	"context"
	"errors"
	"fmt"
	"slices"
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
	// Ref is the caller's own handle on the request, for Config.Pick; the
	// queue never reads it.
	Ref any
	// Report, when set, is filled in before Wait returns.
	Report *Report
}

// Report is what a request's wait was like.
type Report struct {
	// Queued: the request waited in its lane (it was not bound at once).
	Queued bool
	// Passed is how many times room went to a request behind it in its
	// lane (Config.Pick chose it instead).
	Passed int
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
	// Pick, when set, chooses which waiter of a lane is offered room that
	// frees: it sees the lane's window (its first waiters in order, at most
	// Window of them, all of the head's priority class, ending with the
	// first one already passed over MaxPasses times) and returns the index
	// of the one to offer it to; each waiter ahead of that one is passed
	// over once more. So no request is passed over more than MaxPasses
	// times, nor ever by one of a lower class. It is called with the
	// queue's lock held and must be quick and must not call the queue. nil:
	// the head, always.
	Pick func(model string, window []Ticket) int
	// Window bounds the waiters Pick sees (at least 1).
	Window int
	// MaxPasses bounds how many times one waiter may be passed over.
	MaxPasses int
}

// Queue is a bounded set of per-model lanes of waiting requests. Only the
// head of a lane is woken when room may have freed; it offers the room to
// the waiter Config.Pick chooses (itself, without Pick), so a request never
// overtakes one ahead of it in order but by Pick's bounded choice; when the
// head leaves (bound, cancelled, timed out) the next one is woken, so
// nobody is left asleep behind a gone waiter.
type Queue struct {
	cfg     Config
	mu      sync.Mutex
	lanes   map[string]*lane // only lanes with waiters: bounded by Size
	waiting int
	seq     uint64
	// window is Pick's argument, reused (guarded by mu).
	window []Ticket
}

// New returns an empty queue.
func New(cfg Config) *Queue {
	cfg.Window = max(cfg.Window, 1)
	return &Queue{cfg: cfg, lanes: map[string]*lane{}}
}

// Wait returns nil once room() said yes for this request: at once when
// nobody for its model waits and room() does, else when room is offered to
// it (the head of its lane, woken by Wake, offers it as Config.Pick
// chooses) and room() does. room is called with the queue's lock held,
// from Wait's goroutine or from that of the head of its lane; it may take
// the place it reports (a true answer binds the request); it must be quick
// and must not call the queue.
//
// It fails with a fault.Busy naming --queue-size when the queue is full, one
// naming --queue-timeout-secs when the request waited Timeout, or ctx's
// cause when ctx ends first; a request bound in the same moment (by the
// head) is bound, whatever ended.
func (q *Queue) Wait(ctx context.Context, t Ticket, room func() bool) error {
	q.mu.Lock()
	l := q.lanes[t.Model]
	if l == nil || len(l.ws) == 0 {
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
	w := &waiter{t: t, seq: q.seq, wake: make(chan struct{}, 1), room: room}
	l.insert(w)
	q.waiting++
	q.changed(t.Model, l)
	if t.Report != nil {
		t.Report.Queued = true
	}
	if l.ws[0] == w && q.offer(t.Model, l, w) { // it went straight to the head of a lane that was waiting
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
			if w.granted || l.ws[0] == w && q.offer(t.Model, l, w) {
				q.mu.Unlock()
				return nil
			}
			q.mu.Unlock()
		case <-timer.C:
			if q.abandon(t.Model, l, w) {
				return nil
			}
			return fault.Newf(fault.Busy, "%w; retry later", timeoutError(q.cfg.Timeout))
		case <-ctx.Done():
			if q.abandon(t.Model, l, w) {
				return nil
			}
			return context.Cause(ctx)
		}
	}
}

// offer is the head's turn: while room lasts, it offers it to the waiter
// Config.Pick chooses, and reports true once that is the head itself (bound,
// and out of the lane). A waiter behind it that takes the room leaves the
// lane at once and is woken to find itself granted. Called with the lock
// held.
func (q *Queue) offer(model string, l *lane, head *waiter) bool {
	for {
		i := q.pick(model, l)
		c := l.ws[i]
		if !c.room() {
			return false
		}
		for _, p := range l.ws[:i] {
			p.passed++
			if p.t.Report != nil {
				p.t.Report.Passed = p.passed
			}
		}
		q.leave(model, l, c)
		if c == head {
			return true
		}
		c.granted = true
		select {
		case c.wake <- struct{}{}:
		default: // a wake from when it was a head stands for this one
		}
	}
}

// pick is the index, in l.ws, of the waiter offered room now. Called with
// the lock held.
func (q *Queue) pick(model string, l *lane) int {
	if q.cfg.Pick == nil || len(l.ws) < 2 {
		return 0
	}
	q.window = q.window[:0]
	for _, w := range l.ws[:min(len(l.ws), q.cfg.Window)] {
		if w.t.Priority != l.ws[0].t.Priority {
			break
		}
		q.window = append(q.window, w.t)
		if w.passed >= q.cfg.MaxPasses {
			break // nobody behind it may pass it again
		}
	}
	i := q.cfg.Pick(model, q.window)
	clear(q.window) // drop the references until the next pick
	if i < 0 || i >= len(q.window) {
		return 0
	}
	return i
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
		return len(l.ws)
	}
	return 0
}

// abandon removes a waiter that gives up, unless the head granted it room
// first: then it reports true, and the request is bound.
func (q *Queue) abandon(model string, l *lane, w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.granted {
		return true
	}
	q.leave(model, l, w)
	return false
}

// leave removes w from its lane and, when w was its head, wakes the lane's
// new head, which may have room now (the place w did not take, or one that
// freed while w held the head). Called with the lock held.
func (q *Queue) leave(model string, l *lane, w *waiter) {
	i := slices.Index(l.ws, w)
	l.ws = slices.Delete(l.ws, i, i+1)
	q.waiting--
	q.changed(model, l)
	if len(l.ws) == 0 {
		delete(q.lanes, model)
		return
	}
	if i == 0 {
		l.nudge()
	}
}

func (q *Queue) changed(model string, l *lane) {
	if q.cfg.Changed != nil {
		q.cfg.Changed(model, len(l.ws))
	}
}

// lane is one model's waiters, in the order they are served (a lane holds
// at most Config.Size: kept sorted, so that Pick's window is its first
// entries).
type lane struct{ ws []*waiter }

// insert puts w in its place: after every waiter served before it.
func (l *lane) insert(w *waiter) {
	i, _ := slices.BinarySearchFunc(l.ws, w, func(a, b *waiter) int {
		if before(a, b) {
			return -1
		}
		return 1
	})
	l.ws = slices.Insert(l.ws, i, w)
}

// nudge wakes the head; a wake it has not consumed yet stands for this one.
func (l *lane) nudge() {
	if len(l.ws) == 0 {
		return
	}
	select {
	case l.ws[0].wake <- struct{}{}:
	default:
	}
}

// waiter is one waiting request.
type waiter struct {
	t    Ticket
	seq  uint64 // breaks ties of equal tickets by arrival in the queue
	room func() bool
	// passed counts the times room went to a waiter behind it.
	passed int
	// granted: the head gave it room; it left the lane (guarded by the
	// queue's lock).
	granted bool
	wake    chan struct{}
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

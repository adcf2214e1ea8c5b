package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/waitq"
	"github.com/kvgate/kvgate/workers"
)

// Why a request waited in the router (the reason label of
// kvgate_queue_wait_seconds and of the request's log line).
const (
	// ReasonEnginesFull: every healthy candidate engine was at the
	// running-request limit it reports.
	ReasonEnginesFull = "engines_full"
	// ReasonRouterLimit: --max-concurrent-requests requests were bound
	// to engines already.
	ReasonRouterLimit = "router_limit"
	// ReasonPassed: an engine had room while it waited, and late binding's
	// matching gave it to a request behind it that holds more of its
	// prompt there (--late-binding-match-window); it was passed over at
	// most --late-binding-max-passes times.
	ReasonPassed = "passed_over"
)

// Binding configures late binding: how many requests may be bound to
// engines at once, how many may wait in the router and for how long.
type Binding struct {
	// MaxBound is --max-concurrent-requests: how many requests may be
	// bound to engines at once; -1 (or 0): no limit.
	MaxBound int
	// QueueSize is --queue-size: how many may wait in the router, over
	// all models; 0: none wait.
	QueueSize int
	// QueueTimeout is --queue-timeout-secs: how long one may wait.
	QueueTimeout time.Duration
	// AvoidFull places a request, once bound, only on engines below
	// their running-request limit (--late-binding-avoid-full).
	AvoidFull bool
	// Saturation says when an engine is full (--late-binding-saturation).
	Saturation waitq.Saturation
	// MatchWindow, when > 0, binds requests that waited by matching
	// (bindmatch.go): room that frees goes to the one, among the first
	// MatchWindow waiting of the head's class, that loses least of its
	// cache by running on an engine with room now, and it is placed only on
	// such an engine (--late-binding-match-window).
	MatchWindow int
	// MaxPasses bounds how many times matching may pass one request over
	// for one behind it (--late-binding-max-passes).
	MaxPasses int
	// Rejected, when set, is told each refusal's reason (queue_full,
	// queue_timeout): the front's admission series counts them.
	Rejected func(reason string)
	// Waited, when set, is told that a request waited, why and how long
	// (the front puts it on the call's log line).
	Waited func(ctx context.Context, reason string, d time.Duration)
}

// gate is late binding: a request waits in the router, ordered by priority,
// deadline and arrival, until fewer than MaxBound requests are bound to
// engines and some engine that could serve it has room; it is placed only
// then, so the policy chooses with the load and cache state of that moment
// instead of committing the request to an engine's own queue at arrival.
type gate struct {
	cfg Binding
	reg *workers.Registry
	q   *waitq.Queue
	// running counts the requests bound under cfg.MaxBound.
	running atomic.Int64
	// pending counts, per model, the requests bound and not yet placed:
	// the engines' loads do not show them until their placement acquires
	// a worker, so without them a request bound right behind another
	// would see the same free place and both would take it.
	pmu     sync.Mutex
	pending map[string]int
	// waiting receives when requests wait (see Pipeline.WaitStarted); it
	// holds one signal, for the one load poller.
	waiting chan struct{}
	// waking is set while a wake of wakeSoon is pending.
	waking atomic.Bool
	// placeMu, with AvoidFull, orders placements: each judges which
	// engines are full and acquires its own in one step (see placing).
	placeMu sync.Mutex
}

// newGate returns the gate; until stop ends, every change of reg's workers
// (one joined, left or was replaced) wakes the waiting requests: a worker
// that joins with room must not wait for the next load poll to be used.
func newGate(cfg Binding, m *Metrics, reg *workers.Registry, stop context.Context) *gate {
	if cfg.MaxBound == 0 {
		cfg.MaxBound = -1
	}
	if cfg.Rejected == nil {
		cfg.Rejected = func(string) {}
	}
	if cfg.Waited == nil {
		cfg.Waited = func(context.Context, string, time.Duration) {}
	}
	g := &gate{cfg: cfg, reg: reg, pending: map[string]int{}, waiting: make(chan struct{}, 1)}
	// A model's series stays at 0 when nobody waits: the model table bounds
	// the models, and a series that vanishes reads as "no data".
	qc := waitq.Config{Size: cfg.QueueSize, Timeout: cfg.QueueTimeout, Changed: func(model string, n int) {
		m.queueWaiting.WithLabelValues(model).Set(float64(n))
		if n > 0 {
			select {
			case g.waiting <- struct{}{}:
			default: // already signalled
			}
		}
	}}
	if cfg.MatchWindow > 0 {
		qc.Pick, qc.Window, qc.MaxPasses = g.pick, cfg.MatchWindow, cfg.MaxPasses
	}
	g.q = waitq.New(qc)
	unwatch := reg.Watch(func(workers.Change) { g.q.WakeAll() })
	context.AfterFunc(stop, unwatch)
	return g
}

// take takes a place under MaxBound, if one is free.
func (g *gate) take() bool {
	if g.cfg.MaxBound < 0 {
		g.running.Add(1)
		return true
	}
	for {
		n := g.running.Load()
		if n >= int64(g.cfg.MaxBound) {
			return false
		}
		if g.running.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release gives a place back and wakes every model's queue: the place is
// shared by them all.
func (g *gate) release() {
	g.running.Add(-1)
	g.q.WakeAll()
}

// reserve counts j as bound and not yet placed, once.
func (g *gate) reserve(j *Job) {
	if j.reserved {
		return
	}
	j.reserved = true
	g.pmu.Lock()
	g.pending[j.model]++
	g.pmu.Unlock()
}

// placed ends j's reservation: its placement acquired a worker, whose load
// shows it from now on (or failed, and it holds nothing).
func (g *gate) placed(j *Job) {
	if !j.reserved {
		return
	}
	j.reserved = false
	g.pmu.Lock()
	if g.pending[j.model]--; g.pending[j.model] <= 0 {
		delete(g.pending, j.model)
	}
	g.pmu.Unlock()
}

func (g *gate) pendingFor(model string) int {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	return g.pending[model]
}

// bind waits until the job may be placed: a place under the router's limit
// and an engine with room. unbind gives the place back when the request
// ends.
func (s *Pipeline) bind(ctx context.Context, j *Job) (unbind func(), err error) {
	if err := s.gate.await(ctx, s, j, false); err != nil {
		return nil, err
	}
	return s.gate.release, nil
}

// rebind waits, before a retry, for an engine with room (the request keeps
// its place under the router's limit).
func (s *Pipeline) rebind(ctx context.Context, j *Job, attempt int) error {
	if attempt == 0 {
		return nil
	}
	return s.gate.await(ctx, s, j, true)
}

// attemptEnded wakes the job's model's queue: the attempt's engine has a
// request fewer.
func (s *Pipeline) attemptEnded(j *Job) { s.gate.q.Wake(j.model) }

// await is one wait in the queue. Once bound, with AvoidFull, the job's
// placement avoids the engines full when it is placed (see placing).
func (g *gate) await(ctx context.Context, s *Pipeline, j *Job, holding bool) error {
	var rep waitq.Report
	t := waitq.Ticket{Model: j.model, Priority: j.Priority, Arrived: j.Start, Ref: j, Report: &rep}
	if d, ok := ctx.Deadline(); ok {
		t.Deadline = d
	}
	reason, start := "", time.Now()
	if g.q.WaitingFor(j.model) > 0 {
		// It queues behind others for its model: the queue offers it
		// room only once it is at the head, so it may never be told no;
		// it waits for what they wait for.
		reason = g.blocked(s, j, holding)
	}
	err := g.q.Wait(ctx, t, func() bool {
		if !s.engineRoom(j, g.pendingFor(j.model)) {
			reason = ReasonEnginesFull
			return false
		}
		if !holding && !g.take() {
			reason = ReasonRouterLimit
			return false
		}
		g.reserve(j)
		return true
	})
	switch {
	case waitq.Refused(err):
		g.cfg.Rejected("queue_full")
		return err
	case waitq.TimedOut(err):
		g.cfg.Rejected("queue_timeout")
	case errors.Is(err, ErrShuttingDown):
		err = fault.Newf(fault.Unavailable, "%w", err)
	}
	// A request matching bound from the queue goes where it was matched:
	// to an engine with room (see placing). Matching reads whole-request
	// engines only, so a disaggregated model's requests are placed as
	// without it.
	j.onlyFree = err == nil && g.cfg.MatchWindow > 0 && rep.Queued && j.Route.PD == nil
	if rep.Passed > 0 {
		reason = ReasonPassed
	}
	if reason != "" {
		waited := time.Since(start)
		s.metrics.queueWait.WithLabelValues(j.model, reason).Observe(waited.Seconds())
		g.cfg.Waited(ctx, reason, waited)
	}
	return err
}

// blocked is why j would wait now: ReasonEnginesFull, ReasonRouterLimit,
// or "" when neither holds.
func (g *gate) blocked(s *Pipeline, j *Job, holding bool) string {
	switch {
	case !s.engineRoom(j, g.pendingFor(j.model)):
		return ReasonEnginesFull
	case !holding && g.cfg.MaxBound >= 0 && g.running.Load() >= int64(g.cfg.MaxBound):
		return ReasonRouterLimit
	}
	return ""
}

// engineRoom reports whether some engine that could serve j has room for
// it beyond pending requests bound before it (see waitq.Room); with
// prefill/decode disaggregation both a prefill and a decode engine must.
func (s *Pipeline) engineRoom(j *Job, pending int) bool {
	legs, n := s.legs(j.Route)
	for _, l := range legs[:n] {
		if !s.gate.cfg.Saturation.Room(workers.Views(l.engines), j.excluded(), pending) {
			return false
		}
	}
	return true
}

// fitEngines leaves out of j's placements the engines whose own limits
// its prompt exceeds, and refuses it when no engine of a leg would accept
// it (fit), among the engines engineRoom waits for.
func (s *Pipeline) fitEngines(j *Job) error {
	legs, n := s.legs(j.Route)
	for _, l := range legs[:n] {
		if err := fit(l.role, l.engines, boundsOf(l.engines), j); err != nil {
			return err
		}
	}
	return nil
}

// leg is the engines of one role that a request needs one of.
type leg struct {
	role    workers.Role
	engines []*workers.Worker
}

// legs returns the engines a request on r waits for and is placed on, in
// its first n entries: r's regular engines if it has any, else its prefill
// engines and its decode engines, both of which it needs. An array, not a
// slice, so that asking costs no allocation on the queue's path.
func (s *Pipeline) legs(r *Route) (legs [2]leg, n int) {
	if cs := r.Candidates(s.reg, workers.RoleRegular); len(cs) > 0 {
		legs[0] = leg{workers.RoleRegular, cs}
		return legs, 1
	}
	legs[0] = leg{workers.RolePrefill, r.Candidates(s.reg, workers.RolePrefill)}
	legs[1] = leg{workers.RoleDecode, r.Candidates(s.reg, workers.RoleDecode)}
	return legs, 2
}

// placing, with AvoidFull or for a request bound by matching (j.onlyFree),
// chooses the engines j's attempt avoids (j.full)
// at its placement, not when it was bound, and holds every other
// placement off until done is called, once the placement acquired its
// workers (or failed). Judged at binding, two requests bound in the same
// moment saw the same free place and both took it: with several engines
// per leg of a disaggregated model, an engine of one slot was sent two.
// Between judgement and acquisition nothing else is placed, so the
// acquired worker's load shows the next placement that it is taken. A dry
// run (Explain) takes nothing and waits for nobody.
func (g *gate) placing(s *Pipeline, j *Job, dryRun bool) (done func()) {
	if !g.cfg.AvoidFull && !j.onlyFree || dryRun {
		if !dryRun {
			j.full = nil // an earlier attempt's, bound by matching
		}
		return func() {}
	}
	g.placeMu.Lock()
	j.full = s.fullEngines(j)
	return g.placeMu.Unlock
}

// fullEngines are the engines j's attempt should not be placed on: those
// full now (waitq.Saturation.Avoid, role by role). A request that names its
// worker (x-target-worker) goes there whatever its load.
func (s *Pipeline) fullEngines(j *Job) []string {
	if j.Routing != nil && j.Routing.TargetWorker != "" {
		return nil
	}
	var full []string
	ex := j.excluded()
	for _, role := range []workers.Role{workers.RoleRegular, workers.RolePrefill, workers.RoleDecode} {
		full = s.gate.cfg.Saturation.Avoid(full, workers.Views(j.Route.Candidates(s.reg, role)), ex)
	}
	return full
}

// WouldWait says, for Explain, whether a request for j would wait now and
// why ("" when it would be bound at once).
func (s *Pipeline) WouldWait(j *Job) string {
	g := s.gate
	model := s.modelOf(j)
	switch {
	case !s.engineRoom(j, g.pendingFor(model)):
		return "it would wait in the router now: every healthy engine for its model is at its running-request limit (" + ReasonEnginesFull + ")"
	case g.cfg.MaxBound >= 0 && g.running.Load() >= int64(g.cfg.MaxBound):
		return "it would wait in the router now: --max-concurrent-requests requests are bound to engines (" + ReasonRouterLimit + ")"
	}
	if n := g.q.WaitingFor(model); n > 0 {
		if g.cfg.MatchWindow > 0 {
			return fmt.Sprintf("it would wait in the router now, behind %d requests for its model (matching may bind it before some of them once it is among the first %d and an engine with room holds more of its prompt)", n, g.cfg.MatchWindow)
		}
		return fmt.Sprintf("it would wait in the router now, behind %d requests for its model", n)
	}
	return ""
}

// Waiting is how many requests wait in the router for an engine with room
// or a place under --max-concurrent-requests: the load poller polls more
// often while any do.
func (s *Pipeline) Waiting() int { return s.gate.q.Waiting() }

// LoadsRefreshed tells the waiting requests that the engines' loads were
// polled: an engine may have room that the router's own accounting did not
// show (another client's requests ended).
func (s *Pipeline) LoadsRefreshed() { s.gate.q.WakeAll() }

// HealthChanged tells the waiting requests that a worker's health or its
// circuit breaker changed: one that turned healthy, or whose breaker lets
// requests through again, may have room, and they need not wait for the
// next load poll to find it. (Workers that join or leave wake them by
// themselves: the gate follows the registry.) It returns at once and takes
// no lock, so a breaker may call it while locked: the waiting requests
// read the breakers with the queue's lock held, and are woken from a
// goroutine of their own.
func (s *Pipeline) HealthChanged() { s.gate.wakeSoon() }

// wakeSoon wakes every waiting request from another goroutine; changes
// that come while one such wake is pending share it.
func (g *gate) wakeSoon() {
	if g.waking.CompareAndSwap(false, true) {
		go func() {
			g.waking.Store(false) // a change from now on needs a wake of its own
			g.q.WakeAll()
		}()
	}
}

// WaitStarted receives when requests wait in the router: the load poller
// (workers.LoadPollHooks.Wake) then polls at the quicker interval at once,
// not after a wait it chose while nobody waited. It has one receiver.
func (s *Pipeline) WaitStarted() <-chan struct{} { return s.gate.waiting }

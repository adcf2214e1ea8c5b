package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/metadata"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/waitq"
	"github.com/kvgate/kvgate/workers"
)

// Why a request waited in the router (the reason label of
// kvgate_queue_wait_seconds and of the request's log line).
const (
	// reasonEnginesFull: every healthy candidate engine was at the
	// running-request limit it reports.
	reasonEnginesFull = "engines_full"
	// reasonRouterLimit: --max-concurrent-requests requests were bound
	// to engines already.
	reasonRouterLimit = "router_limit"
)

// priorityHeader is the metadata a client sets a request's priority class
// with: an integer, lower served first, as vLLM's request priority; 0 when
// absent.
const priorityHeader = "kvgate-priority"

// maxPriority bounds a priority class either way: enough classes for any
// scheme of tiers, few enough that the value means something.
const maxPriority = 1000

// gate is late binding: a request waits in the router, ordered by priority,
// deadline and arrival, until fewer than --max-concurrent-requests are bound
// to engines and some engine that could serve it has room; it is placed only
// then, so the policy chooses with the load and cache state of that moment
// instead of committing the request to an engine's own queue at arrival.
type gate struct {
	q *waitq.Queue
	// max is --max-concurrent-requests (-1: no limit); running counts the
	// requests bound under it.
	max     int64
	running atomic.Int64
	// avoidFull: see AdmissionConfig.AvoidFullEngines.
	avoidFull bool
	wait      *prometheus.HistogramVec
	waiting   *prometheus.GaugeVec
	// rejected counts refusals (admission's series).
	rejected *prometheus.CounterVec
}

func newGate(cfg AdmissionConfig, rejected *prometheus.CounterVec) *gate {
	if rejected == nil {
		rejected = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_admission_rejected_total"}, []string{"reason"})
	}
	waiting := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kvgate_queue_waiting_requests",
		Help: "Requests waiting in the router for an engine with room or a place under --max-concurrent-requests, by model.",
	}, []string{"model"})
	g := &gate{max: int64(cfg.MaxConcurrentRequests), rejected: rejected, avoidFull: cfg.AvoidFullEngines,
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvgate_queue_wait_seconds",
			Help:    "Time requests waited in the router before being bound to an engine, by model and reason (engines_full: every candidate engine was at its running-request limit; router_limit: --max-concurrent-requests).",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"model", "reason"})}
	// A model's series stays at 0 when nobody waits: the model table bounds
	// the models, and a series that vanishes reads as "no data".
	g.q = waitq.New(waitq.Config{Size: cfg.QueueSize, Timeout: cfg.QueueTimeout, Changed: func(model string, n int) {
		waiting.WithLabelValues(model).Set(float64(n))
	}})
	g.waiting = waiting
	return g
}

// collectors are the gate's series.
func (g *gate) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.wait, g.waiting}
}

// take takes a place under --max-concurrent-requests, if one is free.
func (g *gate) take() bool {
	if g.max < 0 {
		g.running.Add(1)
		return true
	}
	for {
		n := g.running.Load()
		if n >= g.max {
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

// bind waits until the job may be placed: a place under the router's limit
// and an engine with room. unbind gives the place back when the request
// ends. A pipeline without a gate binds at once.
func (s *pipeline) bind(ctx context.Context, j *job) (unbind func(), err error) {
	if s.gate == nil {
		return func() {}, nil
	}
	if err := s.gate.await(ctx, s, j, false); err != nil {
		return nil, err
	}
	return s.gate.release, nil
}

// rebind waits, before a retry, for an engine with room (the request keeps
// its place under the router's limit).
func (s *pipeline) rebind(ctx context.Context, j *job, attempt int) error {
	if s.gate == nil || attempt == 0 {
		return nil
	}
	return s.gate.await(ctx, s, j, true)
}

// attemptEnded wakes the job's model's queue: the attempt's engine has a
// request fewer.
func (s *pipeline) attemptEnded(j *job) {
	if s.gate != nil {
		s.gate.q.Wake(j.model)
	}
}

// await is one wait in the queue. Once bound, with AvoidFullEngines, the
// job avoids the engines that are full at that moment (j.full), so that the
// policy chooses among those with room.
func (g *gate) await(ctx context.Context, s *pipeline, j *job, holding bool) error {
	t, err := ticketOf(ctx, j)
	if err != nil {
		return err
	}
	reason, start := "", time.Now()
	err = g.q.Wait(ctx, t, func() bool {
		if !s.engineRoom(j) {
			reason = reasonEnginesFull
			return false
		}
		if !holding && !g.take() {
			reason = reasonRouterLimit
			return false
		}
		if g.avoidFull {
			j.full = s.fullEngines(ctx, j)
		}
		return true
	})
	switch {
	case waitq.Refused(err):
		g.rejected.WithLabelValues("queue_full").Inc()
		return err
	case waitq.TimedOut(err):
		g.rejected.WithLabelValues("queue_timeout").Inc()
	case errors.Is(err, errShuttingDown):
		err = fault.Newf(fault.Unavailable, "%w", err)
	}
	if reason != "" {
		waited := time.Since(start)
		g.wait.WithLabelValues(j.model, reason).Observe(waited.Seconds())
		labelOf(ctx).waited(reason, waited)
	}
	return err
}

// engineRoom reports whether some engine that could serve j has room (see
// waitq.Room); with prefill/decode disaggregation both a prefill and a
// decode engine must.
func (s *pipeline) engineRoom(j *job) bool {
	r := j.route
	if cs := r.Candidates(s.reg, workers.RoleRegular); len(cs) > 0 {
		return waitq.Room(workers.Views(cs), j.excluded)
	}
	return waitq.Room(workers.Views(r.Candidates(s.reg, workers.RolePrefill)), j.excluded) &&
		waitq.Room(workers.Views(r.Candidates(s.reg, workers.RoleDecode)), j.excluded)
}

// fullEngines are the engines j's attempt should not be placed on: those
// full now. A request that names its worker (x-target-worker) goes there
// whatever its load, as before.
func (s *pipeline) fullEngines(ctx context.Context, j *job) []string {
	if j.metadata != nil && firstHeader(j.metadata, targetWorkerHeaders) != "" ||
		j.metadata == nil && incomingHeader(ctx, targetWorkerHeaders) != "" {
		return nil
	}
	var full []string
	for _, role := range []workers.Role{workers.RoleRegular, workers.RolePrefill, workers.RoleDecode} {
		full = waitq.FullOf(full, workers.Views(j.route.Candidates(s.reg, role)), j.excluded)
	}
	return full
}

// wouldWait says, for Explain, whether a request for j would wait now and
// why ("" when it would be bound at once).
func (s *pipeline) wouldWait(j *job) string {
	switch {
	case s.gate == nil:
		return ""
	case !s.engineRoom(j):
		return "it would wait in the router now: every healthy engine for its model is at its running-request limit (" + reasonEnginesFull + ")"
	case s.gate.max >= 0 && s.gate.running.Load() >= s.gate.max:
		return "it would wait in the router now: --max-concurrent-requests requests are bound to engines (" + reasonRouterLimit + ")"
	}
	model := j.route.Name
	if model == "" {
		model = s.servedModel()
	}
	if n := s.gate.q.WaitingFor(model); n > 0 {
		return fmt.Sprintf("it would wait in the router now, behind %d requests for its model", n)
	}
	return ""
}

// ticketOf orders j in the queue: its priority class (kvgate-priority
// metadata), the call's deadline, its arrival.
func ticketOf(ctx context.Context, j *job) (waitq.Ticket, error) {
	p, err := priorityOf(ctx, j.metadata)
	if err != nil {
		return waitq.Ticket{}, err
	}
	t := waitq.Ticket{Model: j.model, Priority: p, Arrived: j.start}
	if d, ok := ctx.Deadline(); ok {
		t.Deadline = d
	}
	return t, nil
}

// priorityOf reads the kvgate-priority metadata (md, else the call's own).
func priorityOf(ctx context.Context, md metadata.MD) (int, error) {
	var v string
	if md != nil {
		v = firstHeader(md, []string{priorityHeader})
	} else {
		v = incomingHeader(ctx, []string{priorityHeader})
	}
	if v == "" {
		return 0, nil
	}
	p, err := strconv.Atoi(v)
	if err != nil || p < -maxPriority || p > maxPriority {
		return 0, fault.Invalidf(priorityHeader,
			"%s metadata is %.20q; it must be an integer from %d to %d (lower is served first; default 0)",
			priorityHeader, v, -maxPriority, maxPriority)
	}
	return p, nil
}

// explainReason adds to a decision's reason whether the request would wait
// first.
func explainReason(reason, wait string) string {
	if wait == "" {
		return reason
	}
	return reason + "; " + wait
}

// Waiting is how many requests wait in the router for an engine with room
// or a place under --max-concurrent-requests: the load poller polls more
// often while any do.
func (s *Server) Waiting() int { return s.gate.q.Waiting() }

// LoadsRefreshed tells the waiting requests that the engines' loads were
// polled: an engine may have room that the router's own accounting did not
// show (another client's requests ended).
func (s *Server) LoadsRefreshed() { s.gate.q.WakeAll() }

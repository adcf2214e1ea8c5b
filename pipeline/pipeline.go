// Package pipeline is the request path of kvgate once a front has turned a
// call into a Job: place an attempt on worker(s) through the model's Placer,
// start it, relay the engine's stream to the job's sink, observe the outcome
// (load, breakers, policies, metrics), and retry on another worker when one
// fails before the client has seen a token. It knows nothing of the
// transport: the gRPC services, codec, interceptors, admission and the
// wire statuses are package server's, which hands the pipeline jobs and
// turns the faults it returns into statuses at its edge.
package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/kvgate/kvgate/answer"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/workers"
)

// Pipeline is the request path once a front has built a job: place an
// attempt, start it, relay its stream, observe the outcome, retry. It holds
// what that path reads and nothing of the transport (services, codec,
// interceptors, admission queue), so that it can be built and tested without
// a gRPC server: the transport hands it a job whose Send is the sink of the
// client's stream, and the job's Route carries the model and its placer.
type Pipeline struct {
	cfg Config
	// reg is the fleet: the placers read candidates from it and the retry
	// budget counts its able workers.
	reg     *workers.Registry
	metrics *Metrics
	log     *slog.Logger
	// tracer makes the request's spans (a no-op without a Tracer).
	tracer trace.Tracer
	// logprobs bounds the log-probability bytes of requests in flight; nil
	// leaves them unbounded.
	logprobs *answer.Budget
	// active counts requests in the pipeline, retrying those of them that
	// are waiting for or running a retry (the retry budget's two terms).
	active, retrying atomic.Int64
	// hardStop ends when a shutdown's drain period is over: requests still
	// running are cut then.
	hardStop context.Context
	// gate holds requests in the router until they may be bound to an
	// engine (late binding, latebind.go).
	gate *gate
}

// Config is what a pipeline is built from.
type Config struct {
	Reliability
	// AbortTimeout bounds the Abort call sent to a worker when a client
	// goes away. Default 2 s.
	AbortTimeout time.Duration
	// MaxEngineAnswer is the largest message the engine connections
	// accept: a request whose answer could be larger is refused before
	// it is sent. 0: workers.DefaultMaxAnswerBytes.
	MaxEngineAnswer int
	Registry        *workers.Registry
	// Metrics records the pipeline's figures; nil: a set of its own.
	Metrics *Metrics
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Tracer, when set, traces the request's steps.
	Tracer trace.Tracer
	// EndSpan, when set, records a step's outcome on its span: the front
	// decides what an error is called on the wire, so it says how a span
	// reads it. nil: an error status with the error's text.
	EndSpan func(span trace.Span, err error)
	// Stop, when set, is cancelled when requests still running must be
	// cut (the end of a shutdown's drain period).
	Stop context.Context
	// Logprobs, when set, bounds the log-probability bytes of the
	// requests in flight.
	Logprobs *answer.Budget
	// Binding configures late binding; its zero value binds every request
	// at once when some engine has room, with no limit of its own and no
	// queue.
	Binding Binding
}

// New builds a pipeline, applying defaults where c leaves them.
func New(c Config) *Pipeline {
	p := &Pipeline{cfg: c, reg: c.Registry, metrics: c.Metrics, log: c.Logger,
		tracer: c.Tracer, hardStop: c.Stop, logprobs: c.Logprobs}
	if p.reg == nil {
		p.reg = workers.NewRegistry()
	}
	if p.metrics == nil {
		p.metrics = NewMetrics()
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.tracer == nil {
		p.tracer = noop.NewTracerProvider().Tracer(tracerName)
	}
	if p.cfg.EndSpan == nil {
		p.cfg.EndSpan = endSpanPlain
	}
	if p.hardStop == nil {
		p.hardStop = context.Background()
	}
	if p.cfg.AbortTimeout <= 0 {
		p.cfg.AbortTimeout = 2 * time.Second
	}
	if p.cfg.MaxEngineAnswer <= 0 {
		p.cfg.MaxEngineAnswer = workers.DefaultMaxAnswerBytes
	}
	p.gate = newGate(c.Binding, p.metrics, p.reg, p.hardStop)
	return p
}

// InFlight is the number of requests in the pipeline, between placement
// and their end.
func (s *Pipeline) InFlight() int64 { return s.active.Load() }

// Run is the request pipeline once the prompt is known: place an attempt,
// start it, relay its stream, observe the outcome; and when a worker fails
// before the client has seen a token (for a non-streaming call: before its
// completion), try again on another worker, within the retry limits and the
// client's deadline. It is the one path every request
// takes, with or without prefill/decode disaggregation.
func (s *Pipeline) Run(ctx context.Context, j *Job) error {
	// A request still running when the drain period of a shutdown ends is
	// cut here, with a status that says so rather than "canceled".
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.hardStop, func() { cancel(ErrShuttingDown) })
	defer stop()

	j.model = s.modelOf(j)
	s.metrics.modelRequests.WithLabelValues(j.model).Inc()
	defer func() {
		s.metrics.policyLatency.WithLabelValues(j.Route.Placer.PolicyName()).Observe(time.Since(j.Start).Seconds())
	}()
	// Before the queue: a prompt no engine accepts is refused now, and
	// the queue waits only for room on engines that accept it.
	if err := s.fitEngines(j); err != nil {
		return err
	}
	unbind, err := s.bind(ctx, j) // late binding: wait for room
	if err != nil {
		return err
	}
	defer unbind()
	defer s.gate.placed(j) // a bound request that ends before its placement
	s.active.Add(1)
	defer s.active.Add(-1)

	if s.logprobs != nil {
		release, err := s.logprobs.Take(j.InputIDs, j.Sampling)
		if err != nil {
			return err
		}
		defer release()
	}

	var failures []*failure
	unsupported, lastUnsupported := 0, (*failure)(nil)
	releaseRetry := func() {}
	defer func() { releaseRetry() }()
	for attempt := 0; ; attempt++ {
		if err := s.rebind(ctx, j, attempt); err != nil {
			return err
		}
		f := s.attempt(ctx, j, attempt)
		releaseRetry()
		if f == nil {
			return nil
		}
		if f.placement { // nowhere to run
			if len(failures) > 0 && !workers.Unimplemented(f.err) {
				return s.giveUp(ctx, j, failures, f.err.Error())
			}
			if lastUnsupported != nil && len(failures) == 0 && !workers.Unimplemented(f.err) {
				return lastUnsupported.status() // no worker left that might implement it
			}
			return f.status()
		}
		if f.cause == causeUnsupported && !f.delivered && unsupported < maxUnsupported {
			// The worker cannot serve this call (an Embed worker is now
			// left out of Embed's placements; a Generate worker may lack
			// a feature only this request uses, so it is only excluded
			// here): place again at once, which spends no retry budget,
			// since no worker failed.
			unsupported++
			lastUnsupported = f
			j.failed = append(j.failed, f.worker.URL())
			s.metrics.retries.WithLabelValues(f.worker.URL()).Inc()
			continue
		}
		if !f.retryable() {
			return f.status()
		}
		failures = append(failures, f)
		why, release := s.retryRefusal(ctx, attempt)
		if why != "" {
			return s.giveUp(ctx, j, failures, why)
		}
		releaseRetry = release
		j.failed = append(j.failed, f.worker.URL())
		s.metrics.retries.WithLabelValues(f.worker.URL()).Inc()
		if err := s.backoff(ctx, attempt); err != nil {
			return s.giveUp(ctx, j, failures, "the client's deadline leaves no time for another attempt")
		}
	}
}

// maxUnsupported bounds the placements of one request on workers that turn
// out to lack its RPC: each such worker is left out of the next, so this
// only bites when many workers learn it at once.
const maxUnsupported = 8

// attempt places and runs one attempt. It returns nil when the client got
// its completion.
func (s *Pipeline) attempt(ctx context.Context, j *Job, n int) *failure {
	sctx, sel := s.startStep(ctx, "kvgate.select", trace.WithAttributes(attrAttempt.Int(n)))
	placed := s.gate.placing(s, j, false)
	p, err := j.Route.Placer.Place(sctx, j, false)
	placed()
	s.gate.placed(j) // its worker's load shows it now, or it holds none
	if err != nil {
		s.EndSpan(sel, err)
		sel.End()
		return &failure{err: err, placement: true}
	}
	if sel.IsRecording() {
		sel.SetAttributes(p.traceAttrs()...)
	}
	sel.End()
	if j.Commit != nil {
		j.Commit() // the prompt fits the model: worth caching
		j.Commit = nil
	}
	log := s.attemptLogger(j, n, p)
	id := attemptID(j.ID)

	// The attempt's streams live on a context the pipeline ends when it is
	// done with them (completion, a stop string, a timeout, the client).
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	actx, legs := s.startLegs(actx, p, n)
	r := j.Task.exec(actx, cancel, p, id)
	if r.err != nil {
		f := s.classify(ctx, actx, p, r.err, r.tokens)
		f.delivered = r.delivered
		out := r.out
		out.Err = r.err
		p.Run.End(out)
		s.attemptEnded(j)
		p.settle(f)
		if f.cause != causeClientError && f.cause != causeUnsupported && r.abortOnFailure && !p.SelfAborting {
			cancel(nil)
			p.Run.Aborted(s.abort(ctx, log, p.Served(), id), s.abortAgain(ctx, log, p.Served(), id))
		}
		legs.end(f.status())
		f.log(ctx, log)
		return f
	}
	legs.end(nil)
	p.Run.End(r.out)
	s.attemptEnded(j)
	p.settle(nil)
	if r.running {
		// The client has its answer, and the engine is still working on
		// it (a stop string matched here).
		cancel(nil)
		if !p.SelfAborting {
			p.Run.Aborted(s.abort(ctx, log, p.Served(), id), s.abortAgain(ctx, log, p.Served(), id))
		}
	}
	if err := r.deliver(ctx, p, log); err != nil {
		return s.classify(ctx, actx, p, err, r.tokens)
	}
	return nil
}

// giveUp ends a request whose attempts all failed before the first token:
// the client sees UNAVAILABLE naming each worker that failed and why no
// further attempt was made.
func (s *Pipeline) giveUp(ctx context.Context, j *Job, failures []*failure, why string) error {
	last := failures[len(failures)-1]
	if len(failures) == 1 {
		return fault.Newf(fault.Unavailable, "%s; not retried: %s", message(last.status()), why)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "all %d attempts failed before the first token (%s):", len(failures), why)
	// The first four and the last name their workers; the rest are counted.
	shown := failures
	if len(failures) > 5 {
		shown = append(slices.Clone(failures[:4]), last)
	}
	for i, f := range shown {
		if i == 4 && len(failures) > 5 {
			fmt.Fprintf(&b, " ... %d more;", len(failures)-5)
		}
		fmt.Fprintf(&b, " %s: %s;", f.worker.URL(), message(f.err))
	}
	s.log.WarnContext(ctx, "request failed on every attempt", "request_id", j.ID, "attempts", len(failures), "why", why)
	return fault.Newf(fault.Unavailable, "%s", strings.TrimSuffix(b.String(), ";"))
}

// attemptID is the id an attempt is known by on its engine: the client's id
// (a label for engine logs) and a random suffix, so that no two attempts
// share an id, whatever ids clients choose, and nothing one request does to
// its engine (an Abort, a duplicate refusal) can touch another's.
func attemptID(clientID string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return clientID + "." + hex.EncodeToString(b[:])
}

// ErrShuttingDown is the cause of requests cut at the end of the shutdown
// drain period.
var ErrShuttingDown = errors.New("kvgate is shutting down")

// abortAgain returns what sends the same Abort again (see
// heldStream.reabort).
func (s *Pipeline) abortAgain(ctx context.Context, log *slog.Logger, w *workers.Worker, id string) func() error {
	return func() error { return s.abort(ctx, log, w, id) }
}

// abort asks the worker to drop an attempt, on a context of its own since
// the request's context is usually the reason for aborting.
func (s *Pipeline) abort(ctx context.Context, log *slog.Logger, w *workers.Worker, id string) error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.AbortTimeout)
	defer cancel()
	s.metrics.aborts.WithLabelValues(w.URL()).Inc()
	err := w.Backend().Abort(actx, id)
	if err != nil {
		log.WarnContext(ctx, "abort failed", "error", err)
	}
	return err
}

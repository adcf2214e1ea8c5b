package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/modeltable"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// A Placer is how the pipeline reaches engines: it places one attempt of
// a job on worker(s) and returns the plan that runs it. The regular
// placer sends a whole request to the one worker its policy chooses; the
// PD placer (package pdplan) sends a prefill and a decode leg to a pair.
// Everything around an attempt (limits, retries, timeouts, the relay,
// statuses) is the pipeline's and the same for both.
type Placer interface {
	// Place chooses where an attempt runs, never on a worker an earlier
	// attempt failed on (Job.PolicyRequest's Exclude). With dryRun (Explain) no policy changes state and the
	// plan must not be started.
	Place(ctx context.Context, j *Job, dryRun bool) (*Plan, error)
	// PolicyName labels decisions in logs and metrics.
	PolicyName() string
	// Embeddings refuses Embed, with the status to answer, when the
	// placer's workers cannot compute embeddings.
	Embeddings() error
}

// Route is a model of the table as the pipeline uses it: its text stack, its
// policies and the placer that places its requests on its own workers.
type Route = modeltable.Entry[Placer]

// RegularPlacer is the placer of a model r served by whole requests: its
// regular policy places each attempt on one worker. (A disaggregated
// model's placer is pdplan's, which builds two-leg plans.)
func (s *Pipeline) RegularPlacer(r *Route) Placer {
	return &regularDispatcher{s: s, r: r, policy: r.Main()}
}

// Registry is the fleet the pipeline places requests on.
func (s *Pipeline) Registry() *workers.Registry { return s.reg }

// Placed counts a placement's decision by policy (a name as the metrics
// label it) and the worker it chose, for placers outside the pipeline as
// for its own.
func (s *Pipeline) Placed(policy string, dec policy.Decision) {
	s.metrics.decided(policy, dec)
	s.metrics.selections.WithLabelValues(dec.Worker.URL(), policy).Inc()
}

// modelOf names j's model in metrics and in the router's queue: its
// route's name, or, for a router serving one model, the one the workers
// report.
func (s *Pipeline) modelOf(j *Job) string {
	if j.Route.Name != "" {
		return j.Route.Name
	}
	return s.ServedModel()
}

// ServedModel is the model the workers report, for the metrics of a router
// serving one model (the first worker that names one).
func (s *Pipeline) ServedModel() string {
	for _, w := range s.reg.Current().Workers {
		if m := w.Info().Model; m != "" {
			return m
		}
	}
	return ""
}

// regularDispatcher serves whole requests on the registry's regular workers.
type regularDispatcher struct {
	s      *Pipeline
	r      *Route
	policy policy.Policy
}

func (d *regularDispatcher) PolicyName() string { return d.policy.Name() }
func (d *regularDispatcher) Embeddings() error  { return nil }

func (d *regularDispatcher) Place(ctx context.Context, j *Job, dryRun bool) (*Plan, error) {
	candidates, err := implementing(j.Needs, d.r.Candidates(d.s.reg, workers.RoleRegular))
	if err != nil {
		return nil, err
	}
	if err := CheckCandidates(workers.RoleRegular, candidates, j); err != nil {
		return nil, err
	}
	preq := j.PolicyRequest(dryRun)
	// The policy may count the decision as its worker's load until the
	// worker's own count does (Acquire below), or until it is abandoned.
	preq.Acquires = !dryRun
	var dec policy.Decision
	slots, err := ChooseAndAcquire(preq, len(candidates), func() ([]*workers.Worker, func(), error) {
		dec.Abandoned() // the previous try's, whose breaker refused it (or none)
		var err error
		if dec, err = d.policy.Select(ctx, preq, workers.Views(candidates)); err != nil {
			return nil, nil, SelectionError(d.policy.Name(), len(candidates), err)
		}
		return []*workers.Worker{dec.Worker}, nil, nil
	})
	if err != nil {
		dec.Abandoned() // every breaker refused
		return nil, err
	}
	r := &single{s: d.s, pol: d.policy, preq: preq, dec: dec, vocab: d.r.OutputVocab(dec.Worker)}
	r.Plan = Plan{Slots: slots, Run: r}
	r.legBuf[0] = Leg{Role: "regular", Worker: dec.Worker, Policy: d.policy.Name(), Decision: dec}
	r.Legs = r.legBuf[:1]
	if !dryRun {
		r.release = dec.Worker.Acquire()
		r.prefilled = dec.Worker.Prefilling(dec.PrefillTokens(len(preq.InputIDs)))
		// Once the worker counts the request and its prefill: the policy's
		// pending count covers both until then (the cost and wait modes
		// price the prefill queue).
		dec.Acquired()
		d.s.Placed(d.policy.Name(), dec)
	}
	return &r.Plan, nil
}

// single runs a whole request on one worker. Its plan is part of it, so a
// placement costs one allocation.
type single struct {
	Plan
	legBuf  [1]Leg
	s       *Pipeline
	pol     policy.Policy
	preq    *policy.Request
	dec     policy.Decision
	release func()
	// prefilled ends the worker's count of this attempt's prefill tokens
	// (Worker.Prefilling): at the first token, or at the end.
	prefilled workers.Prefill
	// decoded teaches the worker its decode step (Worker.Decoding):
	// started at the first token, done at the end of a completed request.
	decoded workers.Decode
	// vocab bounds the output ids (route.outputVocab).
	vocab int
	// held is the engine's stream, which may outlive the attempt (see
	// held.go); nil until started.
	held *heldStream
}

func (p *single) Start(ctx context.Context, req *workers.GenerateRequest) (workers.Stream, error) {
	sctx, stop := p.s.engineContext(ctx)
	st, err := p.dec.Worker.Backend().Generate(sctx, req)
	if err != nil {
		stop()
		return nil, err
	}
	p.held = holdStream(ctx, st, stop)
	return workers.CheckedStream(p.held, p.vocab), nil
}

// FirstToken tells the worker's accounting that the prompt is prefilled,
// and starts timing the decode (at is zero when the request ends without
// a token).
func (p *single) FirstToken(at time.Time) {
	if at.IsZero() {
		p.prefilled.End()
		return
	}
	p.prefilled.Prefilled()
	if !p.decoded.Started() && p.release != nil {
		p.decoded = p.dec.Worker.Decoding()
	}
}

// Aborted cuts the engine's stream at once when Abort failed: nothing else
// would end it, and cutting the stream is the one signal left (engines
// that honour it drop the request). When Abort succeeded but the stream
// runs on, it is sent again (heldStream.reabort).
func (p *single) Aborted(err error, again func() error) {
	switch {
	case p.held == nil:
	case err != nil:
		p.held.stop()
	default:
		p.held.reabort(again)
	}
}

func (p *single) End(out policy.Outcome) {
	// Before the release: the batch it ran in counts this request.
	if out.Err == nil && len(out.OutputIDs) > 1 {
		p.decoded.Done(len(out.OutputIDs) - 1)
	}
	switch {
	case p.held != nil:
		p.held.release(p.release, p.s.cfg.AbortConfirmTimeout, p.s.hardStop.Done())
	case p.release != nil:
		p.release()
	}
	p.FirstToken(time.Time{})
	if o, ok := p.pol.(policy.Observer); ok {
		o.Observe(p.preq, p.dec, out)
	}
	if out.Err == nil && !out.Unreported && p.dec.Matched != nil {
		p.s.metrics.observePrediction(p.dec.PredictedCachedTokens, out.CachedTokens)
	}
}

// CheckCandidates refuses a job that no worker of a role could serve: none
// is available, or the prompt does not fit the model. Workers too small for
// the prompt, when others can take it, join the job's excluded workers
// (see fit).
func CheckCandidates(role workers.Role, ws []*workers.Worker, j *Job) error {
	if !slices.ContainsFunc(ws, (*workers.Worker).Available) {
		healthy, open := 0, 0
		for _, w := range ws {
			if w.Healthy() {
				healthy++
			}
			if w.Breaker().State() == workers.BreakerOpen {
				open++
			}
		}
		return fault.Newf(fault.Unavailable, "no healthy %sworker: %d registered, %d passing health checks, %d with an open circuit breaker, none available",
			rolePrefix(role), len(ws), healthy, open)
	}
	b := boundsOf(ws)
	vocab := b.vocab
	if vocab == 0 {
		// No engine reports its vocabulary: the tokenizer's holds.
		vocab = j.Route.TokenizerVocab()
	}
	if err := j.Task.check(limits{vocabSize: vocab}); err != nil {
		return err
	}
	return fit(role, ws, b, j)
}

// rolePrefix names a disaggregated request's leg at the head of a message
// about its engines ("prefill ", "decode "); a regular request's has none.
func rolePrefix(role workers.Role) string {
	if role == workers.RoleRegular {
		return ""
	}
	return role.String() + " "
}

// implementing keeps the workers that may be given rpc ("": all of them).
// When every worker has shown it lacks rpc, the answer is UNIMPLEMENTED
// naming each worker's answer: the fleet cannot serve the call, which no
// retry changes until an engine is replaced.
func implementing(rpc workers.RPC, ws []*workers.Worker) ([]*workers.Worker, error) {
	if rpc == "" || len(ws) == 0 {
		return ws, nil
	}
	var out, lacking []*workers.Worker
	for _, w := range ws {
		if w.Implements(rpc) {
			out = append(out, w)
		} else {
			lacking = append(lacking, w)
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "no worker implements %s: ", rpc)
	for i, w := range lacking {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(lacking)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s answered %s: %s", w.URL(), rpc, w.LackWhy(rpc))
	}
	return nil, fault.Newf(fault.Unsupported, "%s", b.String())
}

// ChooseAndAcquire asks choose for the attempt's workers and takes a place in
// each one's circuit breaker. A half-open breaker lets a bounded number of
// probes through, so a worker whose probe places were taken since the policy
// looked is excluded and choose asked again (undo gives back what the
// refused choice reserved), at most n+1 times. A dry run (Explain) chooses
// once and takes nothing.
func ChooseAndAcquire(preq *policy.Request, n int, choose func() (ws []*workers.Worker, undo func(), err error)) (BreakerSlots, error) {
	for tries := 0; tries <= n; tries++ {
		ws, undo, err := choose()
		if err != nil || preq.DryRun {
			return nil, err
		}
		slots, busy := acquireBreakers(ws...)
		if busy == nil {
			return slots, nil
		}
		if undo != nil {
			undo()
		}
		preq.Exclude = append(slices.Clip(preq.Exclude), busy.URL())
	}
	return nil, fault.Newf(fault.Unavailable, "every worker's circuit breaker is half-open with its probes taken; retry shortly")
}

// BreakerSlots are the circuit-breaker places one attempt holds, one per
// worker it occupies.
type BreakerSlots []breakerSlot

type breakerSlot struct {
	w    *workers.Worker
	done func(workers.Verdict)
}

// acquireBreakers takes a place in each worker's breaker, or none: it
// returns the first worker that refused, having given back what it took.
func acquireBreakers(ws ...*workers.Worker) (BreakerSlots, *workers.Worker) {
	var s BreakerSlots
	for _, w := range ws {
		done, ok := w.Breaker().Acquire()
		if !ok {
			s.settle(&failure{cause: causeClientGone})
			return nil, w
		}
		s = append(s, breakerSlot{w, done})
	}
	return s, nil
}

// settle reports an attempt's outcome to each breaker it holds a place in.
func (s BreakerSlots) settle(f *failure) {
	for _, sl := range s {
		switch {
		case f == nil:
			sl.done(workers.Success)
		case f.cause == causeWorker && f.worker == sl.w:
			sl.done(workers.Failure)
		default:
			sl.done(workers.Ignored)
		}
	}
}

// SelectionError says what a policy's refusal means: no worker left is
// unavailable (the fleet may recover), a target the client named wrongly is
// invalid, anything else is a bug.
func SelectionError(name string, n int, err error) error {
	switch {
	case errors.Is(err, policy.ErrInvalidTarget):
		return fault.Newf(fault.Invalid, "%w", err)
	case errors.Is(err, policy.ErrNoHealthyWorker), errors.Is(err, policy.ErrTargetUnavailable):
		return fault.Newf(fault.Unavailable, "%w (%d workers registered)", err, n)
	}
	return fault.Newf(fault.Bug, "policy %s: %w", name, err)
}

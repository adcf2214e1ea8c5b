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
	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// A Placer is how the pipeline reaches engines: it places one attempt of
// a job on worker(s) and returns the plan that runs it. The regular
// Placer sends a whole request to the one worker its policy chooses; the
// PD Placer sends a prefill and a decode leg to a pair. Everything around
// an attempt (limits, retries, timeouts, the relay, statuses) is the
// pipeline's and the same for both.
type Placer interface {
	// Place chooses where an attempt runs, never on a worker in
	// j.excluded. With dryRun (Explain) no policy changes state and the
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

// NewPlacer is the placer of the model r: PD's pairing when it has one,
// else its regular policy.
func (s *Pipeline) NewPlacer(r *Route) Placer {
	if r.PD != nil {
		return &pdDispatcher{s: s, r: r, pd: r.PD, prefill: r.Main().Name(), decode: r.PD.DecodePolicyName()}
	}
	return &regularDispatcher{s: s, r: r, policy: r.Main()}
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
	if err := checkCandidates("", candidates, j); err != nil {
		return nil, err
	}
	preq := j.policyRequest(dryRun)
	var dec policy.Decision
	slots, err := chooseAndAcquire(preq, len(candidates), func() ([]*workers.Worker, func(), error) {
		var err error
		if dec, err = d.policy.Select(ctx, preq, workers.Views(candidates)); err != nil {
			return nil, nil, selectionError(d.policy.Name(), len(candidates), err)
		}
		return []*workers.Worker{dec.Worker}, nil, nil
	})
	if err != nil {
		return nil, err
	}
	r := &single{s: d.s, pol: d.policy, preq: preq, dec: dec, vocab: d.r.OutputVocab(dec.Worker)}
	r.Plan = Plan{slots: slots, run: r}
	r.legBuf[0] = Leg{Role: "regular", Worker: dec.Worker, Policy: d.policy.Name(), Decision: dec}
	r.Legs = r.legBuf[:1]
	if !dryRun {
		r.release = dec.Worker.Acquire()
		r.prefilled = dec.Worker.Prefilling(len(preq.InputIDs) - dec.PredictedCachedTokens)
		d.s.metrics.decided(d.policy.Name(), dec)
		d.s.metrics.selections.WithLabelValues(dec.Worker.URL(), d.policy.Name()).Inc()
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
	prefilled func()
	// vocab bounds the output ids (route.outputVocab).
	vocab int
	// held is the engine's stream, which may outlive the attempt (see
	// held.go); nil until started.
	held *heldStream
}

func (p *single) start(ctx context.Context, req *workers.GenerateRequest) (workers.Stream, error) {
	sctx, stop := p.s.engineContext(ctx)
	st, err := p.dec.Worker.Backend().Generate(sctx, req)
	if err != nil {
		stop()
		return nil, err
	}
	p.held = holdStream(ctx, st, stop)
	return workers.CheckedStream(p.held, p.vocab), nil
}

// firstToken tells the worker's accounting that the prompt is prefilled.
func (p *single) firstToken(time.Time) {
	if p.prefilled != nil {
		p.prefilled()
	}
}

// aborted cuts the engine's stream at once when Abort failed: nothing else
// would end it, and cutting the stream is the one signal left (engines
// that honour it drop the request). When Abort succeeded but the stream
// runs on, it is sent again (heldStream.reabort).
func (p *single) aborted(err error, again func() error) {
	switch {
	case p.held == nil:
	case err != nil:
		p.held.stop()
	default:
		p.held.reabort(again)
	}
}

func (p *single) end(out policy.Outcome) {
	switch {
	case p.held != nil:
		p.held.release(p.release, p.s.cfg.AbortConfirmTimeout, p.s.hardStop.Done())
	case p.release != nil:
		p.release()
	}
	p.firstToken(time.Time{})
	if o, ok := p.pol.(policy.Observer); ok {
		o.Observe(p.preq, p.dec, out)
	}
	if out.Err == nil && !out.Unreported && p.dec.Matched != nil {
		p.s.metrics.observePrediction(p.dec.PredictedCachedTokens, out.CachedTokens)
	}
}

// pdDispatcher serves requests with prefill/decode disaggregation over the
// registry's prefill and decode workers.
type pdDispatcher struct {
	s       *Pipeline
	r       *Route
	pd      *pd.Dispatcher
	prefill string // the policies' names, which label decisions
	decode  string
}

func (d *pdDispatcher) PolicyName() string { return d.prefill }

// Embeddings refuses Embed: disaggregated engines run generation legs (a
// prefill engine hands every request's KV to a decode engine), and no
// worker here serves a whole request. An embedding model is deployed as
// regular workers, behind a router of its own, as SMG does (its PD router
// answers Embeddings with 501).
func (d *pdDispatcher) Embeddings() error {
	return fault.Newf(fault.Precondition,
		"Embed needs regular workers, and this router serves with prefill/decode disaggregation (--pd-disaggregation), "+
			"whose engines run generation legs only; serve the embedding model from a router of regular workers")
}

func (d *pdDispatcher) Place(ctx context.Context, j *Job, dryRun bool) (*Plan, error) {
	prefills, decodes := d.r.Candidates(d.s.reg, workers.RolePrefill), d.r.Candidates(d.s.reg, workers.RoleDecode)
	if err := checkCandidates("prefill ", prefills, j); err != nil {
		return nil, err
	}
	if err := checkCandidates("decode ", decodes, j); err != nil {
		return nil, err
	}
	preq := j.policyRequest(dryRun)
	var dec pd.Pair
	slots, err := chooseAndAcquire(preq, len(prefills)+len(decodes), func() ([]*workers.Worker, func(), error) {
		var err error
		if dec, err = d.pd.Select(ctx, preq, prefills, decodes); err != nil {
			return nil, nil, selectionError("pd", len(prefills)+len(decodes), err)
		}
		return []*workers.Worker{dec.Prefill.Worker, dec.Decode.Worker}, dec.Release, nil
	})
	if err != nil {
		return nil, err
	}
	if !dryRun {
		m, pre, dc := d.s.metrics, "pd_prefill:"+d.prefill, "pd_decode:"+d.decode
		m.decided(pre, dec.Prefill)
		m.decided(dc, dec.Decode)
		m.selections.WithLabelValues(dec.Prefill.Worker.URL(), pre).Inc()
		m.selections.WithLabelValues(dec.Decode.Worker.URL(), dc).Inc()
	}
	r := &pair{s: d.s, att: d.pd.NewAttempt(dec, preq), vocab: d.r.OutputVocab(dec.Decode.Worker), jobStart: j.Start}
	r.Plan = Plan{room: dec.Room, slots: slots, selfAborting: true, run: r}
	r.legBuf = [2]Leg{
		{Role: "prefill", Worker: dec.Prefill.Worker, Policy: d.prefill, Decision: dec.Prefill},
		{Role: "decode", Worker: dec.Decode.Worker, Policy: d.decode, Decision: dec.Decode},
	}
	r.Legs = r.legBuf[:]
	return &r.Plan, nil
}

// pair runs a request disaggregated over a prefill and a decode worker. The
// pd.Attempt owns the legs, their load counting, aborts, policy
// observations and the room; the pair records what the router measures of
// them.
type pair struct {
	Plan
	legBuf   [2]Leg
	s        *Pipeline
	att      *pd.Attempt
	vocab    int       // bounds the output ids (route.outputVocab of the decode worker)
	jobStart time.Time // when the request arrived, for the PD TTFT
}

func (p *pair) start(ctx context.Context, req *workers.GenerateRequest) (workers.Stream, error) {
	// The prefill leg's span ends with that leg, before the decode leg's,
	// which the pipeline ends with the attempt.
	prefillSpan := p.Legs[0].span
	st, err := p.att.Start(ctx, req, func(r pd.PrefillResult) {
		if r.Err == nil {
			p.s.metrics.pdPrefill.Observe(r.Duration.Seconds())
		}
		if prefillSpan != nil {
			prefillSpan.SetAttributes(attrUsagePrompt.Int(int(r.PromptTokens)), attrCachedTokens.Int(int(r.CachedTokens)))
			p.s.endSpan(prefillSpan, r.Err)
			prefillSpan.End()
		}
	})
	if err != nil {
		return nil, err
	}
	return workers.CheckedStream(st, p.vocab), nil
}

// firstToken records the PD handoff figures when the decode leg's first token
// reaches the relay.
func (p *pair) firstToken(at time.Time) {
	if h := p.att.Handoff(at); h > 0 {
		p.s.metrics.pdHandoff.Observe(h.Seconds())
	}
	p.s.metrics.pdTTFT.Observe(at.Sub(p.jobStart).Seconds())
}

func (p *pair) aborted(error, func() error) {}

// end counts a started attempt's failure by the leg that failed; one never
// started gives its room back.
func (p *pair) end(out policy.Outcome) {
	if !p.att.End() {
		return
	}
	var leg *pd.LegError
	if errors.As(out.Err, &leg) {
		p.s.metrics.pdFailures.WithLabelValues(leg.Leg).Inc()
	}
}

// checkCandidates refuses a job that no worker of a side could serve: none is
// available, or the prompt does not fit the model.
func checkCandidates(side string, ws []*workers.Worker, j *Job) error {
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
			side, len(ws), healthy, open)
	}
	l := limitsOf(ws)
	if l.vocabSize == 0 {
		// No engine reports its vocabulary: the tokenizer's holds.
		l.vocabSize = j.Route.TokenizerVocab()
	}
	return j.Task.check(l)
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

// chooseAndAcquire asks choose for the attempt's workers and takes a place in
// each one's circuit breaker. A half-open breaker lets a bounded number of
// probes through, so a worker whose probe places were taken since the policy
// looked is excluded and choose asked again (undo gives back what the
// refused choice reserved), at most n+1 times. A dry run (Explain) chooses
// once and takes nothing.
func chooseAndAcquire(preq *policy.Request, n int, choose func() (ws []*workers.Worker, undo func(), err error)) (breakerSlots, error) {
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

// breakerSlots are the circuit-breaker places one attempt holds, one per
// worker it occupies.
type breakerSlots []breakerSlot

type breakerSlot struct {
	w    *workers.Worker
	done func(workers.Verdict)
}

// acquireBreakers takes a place in each worker's breaker, or none: it
// returns the first worker that refused, having given back what it took.
func acquireBreakers(ws ...*workers.Worker) (breakerSlots, *workers.Worker) {
	var s breakerSlots
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
func (s breakerSlots) settle(f *failure) {
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

// selectionError says what a policy's refusal means: no worker left is
// unavailable (the fleet may recover), a target the client named wrongly is
// invalid, anything else is a bug.
func selectionError(name string, n int, err error) error {
	switch {
	case errors.Is(err, policy.ErrInvalidTarget):
		return fault.Newf(fault.Invalid, "%w", err)
	case errors.Is(err, policy.ErrNoHealthyWorker), errors.Is(err, policy.ErrTargetUnavailable):
		return fault.Newf(fault.Unavailable, "%w (%d workers registered)", err, n)
	}
	return fault.Newf(fault.Bug, "policy %s: %w", name, err)
}

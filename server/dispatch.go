package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// A dispatcher is how the pipeline reaches engines: it places one attempt of
// a job on worker(s) and starts it. The regular dispatcher sends a whole
// request to the one worker its policy chooses; the PD dispatcher sends a
// prefill and a decode leg to a pair. Everything around an attempt (limits,
// retries, timeouts, the relay, statuses) is the pipeline's and the same for
// both.
type dispatcher interface {
	// place chooses where an attempt runs, never on a worker in
	// j.excluded. With dryRun (Explain) no policy changes state and the
	// placement must not be started.
	place(ctx context.Context, j *job, dryRun bool) (placement, error)
	// policyName labels decisions in logs and metrics.
	policyName() string
	// embeddings refuses Embed, with the status to answer, when the
	// dispatcher's workers cannot compute embeddings.
	embeddings() error
}

// A placement is one attempt's chosen worker(s), holding whatever the choice
// reserved (a load count, a bootstrap room) until end.
type placement interface {
	// start sends the attempt; its stream ends when ctx does.
	start(ctx context.Context, req *workers.GenerateRequest) (workers.Stream, error)
	// served is the worker whose tokens the client sees (the decode worker
	// in PD).
	served() *workers.Worker
	// blame returns the worker that caused a failure of this attempt.
	blame(err error) *workers.Worker
	// end releases what the placement holds and reports the outcome to the
	// policies that learn from it. It is called once, whatever happened.
	end(out policy.Outcome)
	// settle reports the attempt to the workers' circuit breakers: nil is
	// a success; a failure counts against the worker it blames when it is
	// the worker's fault, and is ignored otherwise. Called once.
	settle(f *failure)
	// abortOnFailure tells whether the pipeline must send Abort for an
	// attempt that ended early; the PD legs abort themselves.
	abortOnFailure() bool
	// aborted is told how the Abort the pipeline sent (after end) fared.
	aborted(err error)
	// decision is the policy decision that placed the client-visible worker.
	decision() policy.Decision
	// logAttrs describe the placement in log lines.
	logAttrs() []any
	// traceAttrs describe the decision on the selection span.
	traceAttrs() []attribute.KeyValue
	// legs are the engine calls an attempt makes, each with a span.
	legs() []leg
}

// regularDispatcher serves whole requests on the registry's regular workers.
type regularDispatcher struct {
	s      *Server
	r      *route
	policy policy.Policy
}

func (d *regularDispatcher) policyName() string { return d.policy.Name() }
func (d *regularDispatcher) embeddings() error  { return nil }

func (d *regularDispatcher) place(ctx context.Context, j *job, dryRun bool) (placement, error) {
	candidates, err := implementing(j.needs, d.r.Candidates(d.s.reg, workers.RoleRegular))
	if err != nil {
		return nil, err
	}
	if err := checkCandidates("", candidates, j); err != nil {
		return nil, err
	}
	preq := j.policyRequest(ctx, dryRun)
	var dec policy.Decision
	slots, err := chooseAndAcquire(preq, len(candidates), func() ([]*workers.Worker, func(), error) {
		var err error
		if dec, err = d.policy.Select(ctx, preq, candidates); err != nil {
			return nil, nil, selectionError(d.policy.Name(), len(candidates), err)
		}
		return []*workers.Worker{dec.Worker}, nil, nil
	})
	if err != nil {
		return nil, err
	}
	p := &single{s: d.s, pol: d.policy, preq: preq, dec: dec, slots: slots, vocab: d.r.OutputVocab(dec.Worker)}
	if !dryRun {
		p.release = dec.Worker.Acquire()
		p.prefilled = dec.Worker.Prefilling(len(preq.InputIDs) - dec.PredictedCachedTokens)
		d.s.metrics.decided(d.policy.Name(), dec)
		d.s.metrics.selections.WithLabelValues(dec.Worker.URL(), d.policy.Name()).Inc()
	}
	return p, nil
}

// single is a whole request on one worker.
type single struct {
	s       *Server
	pol     policy.Policy
	preq    *policy.Request
	dec     policy.Decision
	release func()
	// prefilled ends the worker's count of this attempt's prefill tokens
	// (Worker.Prefilling): at the first token, or at the end.
	prefilled func()
	slots     breakerSlots
	// vocab bounds the output ids (route.outputVocab).
	vocab int
	// held is the engine's stream, which may outlive the attempt (see
	// held.go); nil until started.
	held *heldStream
}

// firstToken tells the worker's accounting that the prompt is prefilled.
func (p *single) firstToken() {
	if p.prefilled != nil {
		p.prefilled()
	}
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

// why logs a decision's reason, which policies build only when asked
// (Decision.Why): a logger at a level that drops the line never asks. One
// pointer wide, it goes into the attributes without an allocation.
type why struct{ d *policy.Decision }

func (w why) LogValue() slog.Value { return slog.StringValue(w.d.Why()) }

func (p *single) settle(f *failure)           { p.slots.settle(f) }
func (p *single) served() *workers.Worker     { return p.dec.Worker }
func (p *single) blame(error) *workers.Worker { return p.dec.Worker }
func (p *single) abortOnFailure() bool        { return true }

// aborted cuts the engine's stream at once when Abort failed: nothing else
// would end it, and cutting the stream is the one signal left (engines
// that honour it drop the request).
func (p *single) aborted(err error) {
	if err != nil && p.held != nil {
		p.held.stop()
	}
}
func (p *single) decision() policy.Decision { return p.dec }
func (p *single) logAttrs() []any {
	return []any{"worker", p.dec.Worker.URL(), "policy", p.pol.Name(), "branch", p.dec.Branch, "decision", why{&p.dec}}
}

func (p *single) traceAttrs() []attribute.KeyValue {
	return []attribute.KeyValue{attrPolicy.String(p.pol.Name()), attrBranch.String(p.dec.Branch),
		attrPredictedCached.Int(p.dec.PredictedCachedTokens), attrWorker.String(p.dec.Worker.URL())}
}
func (p *single) legs() []leg { return []leg{{role: "regular", w: p.dec.Worker}} }

func (p *single) end(out policy.Outcome) {
	switch {
	case p.held != nil:
		p.held.release(p.release, p.s.cfg.AbortConfirmTimeout, p.s.hardStop.Done())
	case p.release != nil:
		p.release()
	}
	p.firstToken()
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
	s       *Server
	r       *route
	pd      *pd.Dispatcher
	prefill string // the policies' names, which label decisions
	decode  string
}

func (d *pdDispatcher) policyName() string { return d.prefill }

// embeddings refuses Embed: disaggregated engines run generation legs (a
// prefill engine hands every request's KV to a decode engine), and no
// worker here serves a whole request. An embedding model is deployed as
// regular workers, behind a router of its own, as SMG does (its PD router
// answers embeddings with 501).
func (d *pdDispatcher) embeddings() error {
	return status.Error(codes.FailedPrecondition,
		"Embed needs regular workers, and this router serves with prefill/decode disaggregation (--pd-disaggregation), "+
			"whose engines run generation legs only; serve the embedding model from a router of regular workers")
}

func (d *pdDispatcher) place(ctx context.Context, j *job, dryRun bool) (placement, error) {
	prefills, decodes := d.r.Candidates(d.s.reg, workers.RolePrefill), d.r.Candidates(d.s.reg, workers.RoleDecode)
	if err := checkCandidates("prefill ", prefills, j); err != nil {
		return nil, err
	}
	if err := checkCandidates("decode ", decodes, j); err != nil {
		return nil, err
	}
	preq := j.policyRequest(ctx, dryRun)
	var dec pd.Decision
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
	return &pair{s: d.s, d: d, preq: preq, dec: dec, slots: slots}, nil
}

// pair is a request disaggregated over a prefill and a decode worker. The
// pd.Dispatcher owns the legs' load counting, aborts and policy observations.
type pair struct {
	s          *Server
	d          *pdDispatcher
	preq       *policy.Request
	dec        pd.Decision
	st         workers.PDStream
	prefillEnd atomic.Int64 // unix nanos when the prefill leg ended
	slots      breakerSlots
	// prefillSpan is the prefill leg's span, ended when that leg ends
	// (before the decode leg, which the pipeline ends with the attempt).
	prefillSpan trace.Span
}

func (p *pair) start(ctx context.Context, req *workers.GenerateRequest) (workers.Stream, error) {
	st, err := p.d.pd.Dispatch(ctx, p.dec, p.preq, req)
	if err != nil {
		return nil, err
	}
	p.st = st
	checked := workers.CheckedStream(st, p.d.r.OutputVocab(p.dec.Decode.Worker))
	go func() {
		select {
		case <-st.PrefillDone():
			p.prefillEnd.Store(time.Now().UnixNano())
			r := st.Prefill()
			if r.Err == nil {
				p.s.metrics.pdPrefill.Observe(r.Duration.Seconds())
			}
			if sp := p.prefillSpan; sp != nil {
				sp.SetAttributes(attrUsagePrompt.Int(int(r.PromptTokens)), attrCachedTokens.Int(int(r.CachedTokens)))
				endSpan(sp, r.Err)
				sp.End()
			}
		case <-st.Done():
		}
	}()
	return checked, nil
}

func (p *pair) settle(f *failure) { p.slots.settle(f) }

func (p *pair) served() *workers.Worker { return p.dec.Decode.Worker }

func (p *pair) blame(err error) *workers.Worker {
	var leg *workers.LegError
	if errors.As(err, &leg) && leg.Leg == "prefill" {
		return p.dec.Prefill.Worker
	}
	return p.dec.Decode.Worker
}

func (p *pair) traceAttrs() []attribute.KeyValue {
	return []attribute.KeyValue{
		attrPolicy.String(p.d.prefill), attrBranch.String(p.dec.Prefill.Branch),
		attrPredictedCached.Int(p.dec.Prefill.PredictedCachedTokens), attrWorker.String(p.dec.Decode.Worker.URL()),
		attribute.String("kvgate.prefill.worker", p.dec.Prefill.Worker.URL()),
		attribute.String("kvgate.decode.policy", p.d.decode), attribute.String("kvgate.decode.policy.branch", p.dec.Decode.Branch),
		attribute.Int64("kvgate.pd.room", int64(p.dec.Room)),
	}
}
func (p *pair) legs() []leg {
	return []leg{{role: "prefill", w: p.dec.Prefill.Worker}, {role: "decode", w: p.dec.Decode.Worker}}
}

func (p *pair) abortOnFailure() bool      { return false }
func (p *pair) aborted(error)             {}
func (p *pair) decision() policy.Decision { return p.dec.Decode }
func (p *pair) logAttrs() []any {
	return []any{"prefill", p.dec.Prefill.Worker.URL(), "decode", p.dec.Decode.Worker.URL(), "room", p.dec.Room,
		"prefill_branch", p.dec.Prefill.Branch, "decision", why{&p.dec.Prefill}}
}

// end records the PD figures; the dispatcher has observed the legs itself
// and releases the room when both legs are over.
func (p *pair) end(out policy.Outcome) {
	if p.st == nil {
		p.dec.Release() // never started: the room is ours to give back
		return
	}
	var leg *workers.LegError
	if errors.As(out.Err, &leg) {
		p.s.metrics.pdFailures.WithLabelValues(leg.Leg).Inc()
	}
}

// firstToken records the PD handoff figures when the decode leg's first token
// reaches the relay.
func (p *pair) firstToken(at time.Time, jobStart time.Time) {
	if end := p.prefillEnd.Load(); end > 0 {
		if handoff := at.Sub(time.Unix(0, end)); handoff > 0 {
			p.s.metrics.pdHandoff.Observe(handoff.Seconds())
		}
	}
	p.s.metrics.pdTTFT.Observe(at.Sub(jobStart).Seconds())
}

// checkCandidates refuses a job that no worker of a side could serve: none is
// available, or the prompt does not fit the model.
func checkCandidates(side string, ws []*workers.Worker, j *job) error {
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
		return status.Errorf(codes.Unavailable, "no healthy %sworker: %d registered, %d passing health checks, %d with an open circuit breaker, none available",
			side, len(ws), healthy, open)
	}
	l := limitsOf(ws)
	if l.vocabSize == 0 {
		// No engine reports its vocabulary: the tokenizer's holds.
		l.vocabSize = j.route.TokenizerVocab()
	}
	return j.task.check(l)
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
	return nil, status.Error(codes.Unimplemented, b.String())
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
	return nil, status.Errorf(codes.Unavailable, "every worker's circuit breaker is half-open with its probes taken; retry shortly")
}

// breakerSlots are the circuit-breaker places one attempt holds, one per
// worker it occupies.
type breakerSlots []breakerSlot

type breakerSlot struct {
	w    *workers.Worker
	done func(workers.Outcome)
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

// selectionError turns a policy's refusal into a status: no worker left is
// UNAVAILABLE (the fleet may recover), a target the client named wrongly is
// INVALID_ARGUMENT, anything else is a bug.
func selectionError(name string, n int, err error) error {
	switch {
	case errors.Is(err, policy.ErrInvalidTarget):
		return status.Errorf(codes.InvalidArgument, "%v", err)
	case errors.Is(err, policy.ErrNoHealthyWorker), errors.Is(err, policy.ErrTargetUnavailable):
		return status.Errorf(codes.Unavailable, "%v (%d workers registered)", err, n)
	}
	return status.Errorf(codes.Internal, "policy %s: %v", name, err)
}

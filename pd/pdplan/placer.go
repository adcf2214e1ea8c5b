// Package pdplan places a disaggregated model's requests: it turns pd's
// pairing (a prefill and a decode worker, a bootstrap room) into the
// pipeline's two-leg plan, whose run is a pd.Attempt (the legs, their abort
// rules, the room), and records the PD figures the router exports.
//
// It is a package of its own, beside pd rather than in it, because the plan
// is the pipeline's type and the pipeline reads the model table, which
// holds pd's Dispatcher: pd importing the pipeline would close that
// circle.
package pdplan

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/pipeline"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// Placer places a disaggregated model's requests on its prefill and decode
// workers: pd.Dispatcher pairs them, and each attempt's plan has two legs
// whose run is a pd.Attempt.
type Placer struct {
	s       *pipeline.Pipeline
	m       *Metrics
	r       *pipeline.Route
	pd      *pd.Dispatcher
	prefill string // the policies' names, which label decisions
	decode  string
}

// NewPlacer is the placer of r, a model with a PD pairing (r.PD), whose
// attempts run through s and whose PD figures go to m.
func NewPlacer(s *pipeline.Pipeline, m *Metrics, r *pipeline.Route) *Placer {
	return &Placer{s: s, m: m, r: r, pd: r.PD, prefill: r.Main().Name(), decode: r.PD.DecodePolicyName()}
}

// PolicyName is the prefill policy's: the one that reads the prompt.
func (d *Placer) PolicyName() string { return d.prefill }

// Embeddings refuses Embed: disaggregated engines run generation legs (a
// prefill engine hands every request's KV to a decode engine), and no
// worker here serves a whole request. An embedding model is deployed as
// regular workers, behind a router of its own, as SMG does (its PD router
// answers Embeddings with 501).
func (d *Placer) Embeddings() error {
	return fault.Newf(fault.Precondition,
		"Embed needs regular workers, and this router serves with prefill/decode disaggregation (--pd-disaggregation), "+
			"whose engines run generation legs only; serve the embedding model from a router of regular workers")
}

// Place pairs a prefill and a decode worker for an attempt of j.
func (d *Placer) Place(ctx context.Context, j *pipeline.Job, dryRun bool) (*pipeline.Plan, error) {
	prefills, decodes := d.r.Candidates(d.s.Registry(), workers.RolePrefill), d.r.Candidates(d.s.Registry(), workers.RoleDecode)
	if err := pipeline.CheckCandidates(workers.RolePrefill, prefills, j); err != nil {
		return nil, err
	}
	if err := pipeline.CheckCandidates(workers.RoleDecode, decodes, j); err != nil {
		return nil, err
	}
	preq := j.PolicyRequest(dryRun)
	// The policies may count their decisions as the workers' load until
	// the workers' own counts do (Acquire below), or until abandoned.
	preq.Acquires = !dryRun
	var dec pd.Pair
	acquired := func() { dec.Prefill.Acquired(); dec.Decode.Acquired() }
	abandoned := func() { dec.Prefill.Abandoned(); dec.Decode.Abandoned() }
	slots, err := pipeline.ChooseAndAcquire(preq, len(prefills)+len(decodes), func() ([]*workers.Worker, func(), error) {
		abandoned() // the previous try's, whose breaker refused it (or none)
		var err error
		if dec, err = d.pd.Select(ctx, preq, prefills, decodes); err != nil {
			return nil, nil, pipeline.SelectionError("pd", len(prefills)+len(decodes), err)
		}
		return []*workers.Worker{dec.Prefill.Worker, dec.Decode.Worker}, dec.Release, nil
	})
	if err != nil {
		abandoned() // every breaker refused
		return nil, err
	}
	if !dryRun {
		d.s.Placed("pd_prefill:"+d.prefill, dec.Prefill)
		d.s.Placed("pd_decode:"+d.decode, dec.Decode)
	}
	r := &pair{s: d.s, m: d.m, att: d.pd.NewAttempt(dec, preq), vocab: d.r.OutputVocab(dec.Decode.Worker), jobStart: j.Start}
	if !dryRun {
		// Both workers' loads show the attempt from its placement on, as a
		// regular placement's does: the pipeline ends the request's
		// reservation in the late-binding queue now. The legs take the
		// counts over when they start.
		r.att.Hold()
		// The prefill engine counts the prompt's uncached tokens as queued
		// prefill until its leg ends, as a regular placement's engine does
		// until the first token: the cost and wait modes price that queue,
		// and the leg's time teaches the engine's prefill rate.
		r.prefilled = dec.Prefill.Worker.Prefilling(dec.Prefill.PrefillTokens(len(preq.InputIDs)))
		acquired()
	}
	r.Plan = pipeline.Plan{Room: dec.Room, Slots: slots, SelfAborting: true, Run: r}
	r.legBuf = [2]pipeline.Leg{
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
	pipeline.Plan
	legBuf   [2]pipeline.Leg
	s        *pipeline.Pipeline
	m        *Metrics
	att      *pd.Attempt
	vocab    int       // bounds the output ids (route.outputVocab of the decode worker)
	jobStart time.Time // when the request arrived, for the PD TTFT
	// prefilled ends the prefill engine's count of the prompt's tokens
	// (Worker.Prefilling): when the prefill leg ends, or at the end.
	prefilled workers.Prefill
	// decoded teaches the decode engine (the decode leg's worker) its
	// decode step (Worker.Decoding), from the decode leg's first token to
	// the end of a completed request, as a regular placement's does: the
	// wait mode prices a decode candidate's batch with it.
	decoded workers.Decode
}

func (p *pair) Start(ctx context.Context, req *workers.GenerateRequest) (workers.Stream, error) {
	// The prefill leg's span ends with that leg, before the decode leg's,
	// which the pipeline ends with the attempt.
	prefillSpan := p.Legs[0].Span
	st, err := p.att.Start(ctx, req, func(r pd.PrefillResult) {
		if r.Err == nil {
			p.prefilled.Prefilled()
			p.m.prefill.Observe(r.Duration.Seconds())
		} else {
			p.prefilled.End()
		}
		if prefillSpan != nil {
			prefillSpan.SetAttributes(attrUsagePrompt.Int(int(r.PromptTokens)), attrCachedTokens.Int(int(r.CachedTokens)))
			p.s.EndSpan(prefillSpan, r.Err)
			prefillSpan.End()
		}
	})
	if err != nil {
		return nil, err
	}
	return workers.CheckedStream(st, p.vocab), nil
}

// FirstToken starts timing the decode leg and records the PD handoff
// figures when the decode leg's first token reaches the relay.
func (p *pair) FirstToken(at time.Time) {
	if !p.decoded.Started() {
		p.decoded = p.legBuf[1].Worker.Decoding()
	}
	if h := p.att.Handoff(at); h > 0 {
		p.m.handoff.Observe(h.Seconds())
	}
	p.m.ttft.Observe(at.Sub(p.jobStart).Seconds())
}

func (p *pair) Aborted(error, func() error) {}

// End teaches the decode engine its step from a completed request, ends the
// prefill engine's count of the prompt (if the prefill leg has not), and
// counts a started attempt's failure by the leg that failed; one never
// started gives its room back.
func (p *pair) End(out policy.Outcome) {
	// The decode leg has ended by now (its engine's load no longer counts
	// the request), so the batch averaged over its first token and its end
	// reads half a request low; the step's growth per request is the same.
	if out.Err == nil && len(out.OutputIDs) > 1 {
		p.decoded.Done(len(out.OutputIDs) - 1)
	}
	p.prefilled.End()
	if !p.att.End() {
		return
	}
	var leg *pd.LegError
	if errors.As(out.Err, &leg) {
		p.m.failures.WithLabelValues(leg.Leg).Inc()
	}
}

// Span attributes of the prefill leg's span, as the pipeline spells them.
const (
	attrCachedTokens = attribute.Key("kvgate.usage.cached_tokens")
	attrUsagePrompt  = attribute.Key("kvgate.usage.prompt_tokens")
)

// Metrics are the PD figures: time to the decode leg's first token, the
// prefill legs' durations, the KV handoff, and failures by leg. It is a
// prometheus.Collector, which the router registers beside its own series.
type Metrics struct {
	ttft, prefill, handoff prometheus.Histogram
	failures               *prometheus.CounterVec
}

// latencyBuckets span 1 ms to about 2 minutes, as the router's other
// latency histograms do.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 18)

// NewMetrics creates the PD series, registered nowhere until a registry
// takes the Metrics as a collector.
func NewMetrics() *Metrics {
	return &Metrics{
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvgate_pd_time_to_first_token_seconds",
			Help:    "With prefill/decode disaggregation: from receiving the request to the decode leg's first token.",
			Buckets: latencyBuckets,
		}),
		prefill: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvgate_pd_prefill_duration_seconds",
			Help:    "Duration of successful prefill legs.",
			Buckets: latencyBuckets,
		}),
		handoff: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvgate_pd_kv_transfer_seconds",
			Help:    "From the prefill leg's end to the decode leg's first token: the KV transfer plus the first decode step.",
			Buckets: latencyBuckets,
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_pd_failures_total",
			Help: "Disaggregated requests that failed, by the leg that failed (prefill or decode).",
		}, []string{"leg"}),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all() {
		c.Collect(ch)
	}
}

func (m *Metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.ttft, m.prefill, m.handoff, m.failures}
}

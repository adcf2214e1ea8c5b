package pipeline

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvgate/kvgate/workers"
)

// tracerName names the pipeline's spans when no Tracer is given (they are
// then not recorded).
const tracerName = "github.com/kvgate/kvgate/pipeline"

// Span attribute keys of the pipeline's steps, as the front's spans spell
// them: the kvgate.* keys are ours.
const (
	attrPolicy          = attribute.Key("kvgate.policy")
	attrBranch          = attribute.Key("kvgate.policy.branch")
	attrPredictedCached = attribute.Key("kvgate.predicted_cached_tokens")
	attrWorker          = attribute.Key("kvgate.worker")
	attrWorkerURL       = attribute.Key("kvgate.worker.url")
	attrRole            = attribute.Key("kvgate.worker.role")
	attrAttempt         = attribute.Key("kvgate.attempt")
	attrCachedTokens    = attribute.Key("kvgate.usage.cached_tokens")
	attrCompletion      = attribute.Key("kvgate.usage.completion_tokens")
	attrUsagePrompt     = attribute.Key("kvgate.usage.prompt_tokens")
	attrFinishReason    = attribute.Key("kvgate.finish_reason")
)

// legSpans are the client spans of one attempt's engine calls: one for a
// regular worker, a prefill and a decode leg for a disaggregated pair.
type legSpans struct {
	byURL   map[string]context.Context
	spans   []trace.Span
	endSpan func(trace.Span, error)
}

// startLegs opens a client span per leg of p, child of ctx's span, and
// returns the context to start the attempt on: with one leg it holds that
// leg's span; with two, each engine call carries its own leg's span
// (workers.WithLegContexts).
func (s *Pipeline) startLegs(ctx context.Context, p *Plan, attempt int) (context.Context, *legSpans) {
	legs := p.Legs
	if !trace.SpanFromContext(ctx).IsRecording() {
		// startStep would open no span and return ctx for every leg: each
		// leg's call runs on ctx, without the spans' names, options and
		// the map of them (8 allocations per request).
		none := trace.SpanFromContext(context.Background())
		for i := range legs {
			legs[i].Span = none
		}
		return ctx, &legSpans{endSpan: s.cfg.EndSpan}
	}
	ls := &legSpans{byURL: make(map[string]context.Context, len(legs)), endSpan: s.cfg.EndSpan}
	var lctx context.Context
	for i := range legs {
		l := &legs[i]
		lctx, l.Span = s.startStep(ctx, "kvgate.dispatch "+l.Role, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attrWorkerURL.String(l.Worker.URL()), attrRole.String(l.Role), attrAttempt.Int(attempt)))
		ls.byURL[l.Worker.URL()] = lctx
		ls.spans = append(ls.spans, l.Span)
	}
	if len(legs) == 1 {
		return lctx, ls
	}
	return workers.WithLegContexts(ctx, func(url string) context.Context { return ls.byURL[url] }), ls
}

// end closes every leg span still open with the attempt's outcome (a leg
// that ended earlier, the prefill leg, keeps its own).
func (ls *legSpans) end(err error) {
	for _, sp := range ls.spans {
		ls.endSpan(sp, err)
		sp.End()
	}
}

// startStep opens a pipeline step's span under the request span of ctx.
// Without a recording request span (tracing off, a trace not sampled, or an
// Admin call such as Explain that runs the same steps) it opens nothing, so
// that no step ever starts a trace of its own.
func (s *Pipeline) startStep(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return s.tracer.Start(ctx, name, opts...)
}

// EndSpan records a step's outcome on its span, as Config.EndSpan says.
func (s *Pipeline) EndSpan(span trace.Span, err error) { s.cfg.EndSpan(span, err) }

// endSpanPlain records an error as the span's error status, for a pipeline
// built without Config.EndSpan.
func endSpanPlain(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(otelcodes.Error, err.Error())
	}
}

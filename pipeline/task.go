package pipeline

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/kvgate/kvgate/answer"
	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// A Task is the part of a request that differs between RPCs: what an
// attempt sends to the worker(s) it was placed on, and how the answer reaches
// the client. Everything around it is the pipeline's and the same for every
// task: admission, placement through the policy, breakers, load counting,
// retries, timeouts' classification, the status of a failure, spans and
// logs. A generation (Generate, Chat) streams tokens; an embedding batch
// (Embed) is answered at once.
type Task interface {
	// check refuses a request that cannot succeed on workers with limits l
	// (token ids beyond the vocabulary, inputs beyond the context), before
	// anything is placed.
	check(l limits) error
	// exec runs one attempt on p. actx ends with the attempt; cancel ends
	// it early with a cause (errFirstTokenTimeout, errStreamIdle), which
	// the pipeline's classification reads. id is the attempt's engine id.
	exec(actx context.Context, cancel context.CancelCauseFunc, p *Plan, id string) attemptResult
}

// attemptResult is how far an attempt got.
type attemptResult struct {
	// err is the attempt's failure; nil when the engine answered in full.
	err error
	// tokens are the output tokens received before err.
	tokens int
	// delivered: the client has seen part of the output, so no other
	// worker may take over.
	delivered bool
	// out is the outcome reported to the placement's policy (err aside).
	out policy.Outcome
	// abortOnFailure: a failed attempt may leave the engine working (a
	// generation stream), so it is sent Abort.
	abortOnFailure bool
	// running: the attempt succeeded, and the engine is still working on
	// it (a stop string matched in the router), so it is aborted.
	running bool
	// deliver sends a successful attempt's answer to the client and
	// records it (token counters, the request span, the log line).
	deliver func(ctx context.Context, p *Plan, log *slog.Logger) error
}

// generation is a Generate or Chat request: a prompt whose output is
// relayed to the client as the engine streams it.
type generation struct {
	s *Pipeline
	j *Job
}

func (g *generation) check(l limits) error {
	if err := validateAgainst(g.j.InputIDs, g.j.Sampling, l); err != nil {
		return err
	}
	return answer.CheckSize(g.j.InputIDs, g.j.Sampling, l.maxContext, g.s.cfg.MaxEngineAnswer)
}

func (g *generation) exec(actx context.Context, cancel context.CancelCauseFunc, p *Plan, id string) attemptResult {
	s, j := g.s, g.j
	rel := s.newRelay(j, cancel, p)
	defer rel.stopTimer()

	smp := toSampling(j.Sampling)
	if c := j.Answer.Constraint(); c.Kind != workers.NoConstraint {
		smp.Constraint = c
	}
	es, err := p.Run.Start(actx, &workers.GenerateRequest{RequestID: id, InputIDs: j.InputIDs, Sampling: smp, Logprobs: answer.LogprobRequest(j.Sampling)})
	var done *kvgatev1.GenerateComplete
	if err == nil {
		done, err = rel.run(es)
	}
	r := attemptResult{err: err, tokens: len(rel.output), abortOnFailure: true}
	if err != nil {
		r.delivered = j.Stream && len(rel.output) > 0
		r.out = policy.Outcome{CachedTokens: int(rel.last.CachedTokens)}
		return r
	}
	r.out = policy.Outcome{CachedTokens: int(done.Usage.GetCachedTokens()), OutputIDs: done.OutputIds}
	speculativeUsage(done.Usage, rel.last.Final)
	if rel.stopped || rel.early {
		r.out.OutputIDs = nil // aborted on the engine, which keeps no output of it
		r.running = true
	}
	r.deliver = func(ctx context.Context, p *Plan, log *slog.Logger) error { return g.deliver(ctx, p, log, done) }
	return r
}

// deliver sends the completion.
func (g *generation) deliver(ctx context.Context, p *Plan, log *slog.Logger, done *kvgatev1.GenerateComplete) error {
	s, j := g.s, g.j
	done.Worker = p.Served().URL()
	if l := p.Leg("prefill"); l != nil {
		done.PrefillWorker = l.Worker.URL()
	}
	if err := j.Send(nil, done); err != nil {
		return err
	}
	s.metrics.countTokens(done.Worker, done.GetUsage())
	if j.Answer.ParsesTools() {
		if n := len(done.ToolCalls); n > 0 {
			s.metrics.toolCalls.WithLabelValues(j.model, "parsed").Add(float64(n))
		}
		if done.MalformedToolCall {
			s.metrics.toolCalls.WithLabelValues(j.model, "malformed").Inc()
		}
		log = log.With("tool_calls", len(done.ToolCalls), "malformed_tool_call", done.MalformedToolCall)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		u := done.GetUsage()
		span.SetAttributes(attrWorker.String(done.Worker), attrUsagePrompt.Int(int(u.GetPromptTokens())),
			attrCompletion.Int(int(u.GetCompletionTokens())), attrCachedTokens.Int(int(u.GetCachedTokens())),
			attrFinishReason.String(finishName(done.FinishReason)))
	}
	log.InfoContext(ctx, "generate done",
		"prompt_tokens", done.Usage.PromptTokens,
		"cached_tokens", done.Usage.CachedTokens,
		"completion_tokens", done.Usage.CompletionTokens,
		"finish_reason", done.FinishReason.String(),
		"duration", time.Since(j.Start))
	return nil
}

// Generation is the task of a Generate or Chat job: its prompt is sent to
// the placed worker(s) and the output relayed to j.Send as it streams.
func (s *Pipeline) Generation(j *Job) Task { return &generation{s: s, j: j} }

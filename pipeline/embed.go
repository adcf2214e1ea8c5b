package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// Embedding is an Embed request's task: its inputs as token ids, each sent
// to the placed worker with its own engine call, concurrently.
type Embedding struct {
	s      *Pipeline
	j      *Job
	inputs [][]uint32
	resp   *kvgatev1.EmbedResponse // the answer, once delivered
}

// Embedding makes j the Embed batch of inputs (token ids, one slice per
// input): the batch is placed on its first input's tokens.
func (s *Pipeline) Embedding(j *Job, inputs [][]uint32) *Embedding {
	t := &Embedding{s: s, j: j, inputs: inputs}
	j.InputIDs, j.Task = inputs[0], t
	return t
}

// Response is the answer of a batch that succeeded (nil before).
func (t *Embedding) Response() *kvgatev1.EmbedResponse { return t.resp }

// Inputs are the batch's inputs as token ids, one slice per input.
func (t *Embedding) Inputs() [][]uint32 { return t.inputs }

// check refuses inputs the workers cannot take: a token id outside the
// vocabulary, an input longer than the model's context (an embedding has
// no output, so the whole context is the input's) or than the engines
// accept.
func (t *Embedding) check(l limits) error {
	for i, ids := range t.inputs {
		if l.vocabSize > 0 {
			for k, id := range ids {
				if int(id) >= l.vocabSize {
					return fault.Invalidf(fmt.Sprintf("inputs[%d].input_ids[%d]", i, k), "inputs[%d].input_ids[%d] is %d; token ids must be below the model's vocab_size %d", i, k, id, l.vocabSize)
				}
			}
		}
		if l.truncates {
			continue // the engine cuts the input to fit
		}
		if l.maxContext > 0 && len(ids) > l.maxContext {
			return fault.Invalidf(fmt.Sprintf("inputs[%d]", i), "inputs[%d] has %d tokens; the model's context is %d tokens", i, len(ids), l.maxContext)
		}
		// max_req_input_len keeps a token for the output, which an
		// embedding does not make.
		if l.maxInput > 0 && len(ids) > l.maxInput+1 {
			return fault.Invalidf(fmt.Sprintf("inputs[%d]", i), "inputs[%d] has %d tokens; the engines accept at most %d (their max_req_input_len, and the token it keeps for output)",
				i, len(ids), l.maxInput+1)
		}
	}
	return nil
}

// exec embeds every input on the placed worker. The first failure cancels
// the other calls and fails the attempt: a batch is answered whole or
// retried whole. An embedding is a prefill, so its answer counts as its
// first token for --first-token-timeout.
func (t *Embedding) exec(actx context.Context, cancel context.CancelCauseFunc, p *Plan, id string) attemptResult {
	if d := t.s.cfg.FirstTokenTimeout; d > 0 {
		timer := time.AfterFunc(d, func() { cancel(errFirstTokenTimeout) })
		defer timer.Stop()
	}
	r := attemptResult{out: policy.Outcome{Unreported: true}}
	ctx, stop := context.WithCancelCause(actx)
	defer stop(nil)
	w := p.Served()
	results := make([]*workers.EmbedResult, len(t.inputs))
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for i, ids := range t.inputs {
		wg.Go(func() {
			res, err := w.Backend().Embed(ctx, &workers.EmbedRequest{RequestID: fmt.Sprintf("%s.%d", id, i), InputIDs: ids})
			if err != nil {
				once.Do(func() { first = err; stop(err) })
				return
			}
			results[i] = res
		})
	}
	wg.Wait()
	if first == nil {
		dim := len(results[0].Embedding)
		for i, res := range results {
			if len(res.Embedding) != dim {
				first = &fault.Error{Kind: fault.Corrupt, Err: workers.ErrBadEmbedding, Msg: fmt.Sprintf(
					"worker returned embeddings of %d values for inputs[0] and %d for inputs[%d]", dim, len(res.Embedding), i)}
				break
			}
		}
	}
	if first != nil {
		if workers.Lacks(workers.RPCEmbed, first) && w.MarkLacking(workers.RPCEmbed, first) {
			t.s.metrics.rpcLacking.WithLabelValues(w.URL(), string(workers.RPCEmbed)).Inc()
			t.s.log.WarnContext(actx, "worker left out of Embed: it does not implement it", "worker", w.URL(),
				"answer", first, "recheck_after", workers.LackingRecheck)
		}
		r.err = first
		return r
	}
	r.deliver = func(ctx context.Context, p *Plan, log *slog.Logger) error {
		t.deliver(ctx, p, log, results)
		return nil
	}
	return r
}

// deliver keeps the response for the handler to return.
func (t *Embedding) deliver(ctx context.Context, p *Plan, log *slog.Logger, results []*workers.EmbedResult) {
	resp := &kvgatev1.EmbedResponse{RequestId: t.j.ID, Worker: p.Served().URL(), Usage: &kvgatev1.Usage{}}
	for _, res := range results {
		resp.Embeddings = append(resp.Embeddings, &kvgatev1.Embedding{Embedding: res.Embedding, PromptTokens: res.PromptTokens})
		resp.Usage.PromptTokens += res.PromptTokens
	}
	t.resp = resp
	t.s.metrics.embedTokens.WithLabelValues(resp.Worker).Add(float64(resp.Usage.PromptTokens))
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrWorker.String(resp.Worker), attrUsagePrompt.Int(int(resp.Usage.PromptTokens)))
	}
	log.InfoContext(ctx, "embed done",
		"inputs", len(results),
		"prompt_tokens", resp.Usage.PromptTokens,
		"dimension", len(results[0].Embedding),
		"duration", time.Since(t.j.Start))
}

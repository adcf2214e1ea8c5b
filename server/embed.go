package server

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
	"github.com/kvgate/kvgate/tokenize/cache"
	"github.com/kvgate/kvgate/workers"
)

// Embed computes one embedding per input. The request takes the pipeline
// every generation takes (admission, placement by the policy, retries,
// breakers, spans, the request log); only what an attempt sends differs,
// which the embedding task holds.
func (r *router) Embed(ctx context.Context, req *kvgatev1.EmbedRequest) (*kvgatev1.EmbedResponse, error) {
	j, t, err := r.s.embedJob(ctx, req)
	if err != nil {
		nameRejected(ctx, req.GetRequestId())
		return nil, err
	}
	j.traced(ctx)
	if err := r.s.run(ctx, j); err != nil {
		return nil, err
	}
	return t.resp, nil
}

// embedJob validates an Embed request and turns it into a job: the inputs
// as token ids (text tokenized through the router's caches exactly as
// Generate's text is), sizes checked before any tokenizing.
//
// The whole batch goes to one worker, placed by the policy on the first
// input's tokens: one placement keeps the batch one unit for admission,
// load counting, retries and the breaker (a batch fails or succeeds
// whole), a repeated batch finds the same worker, and the client gets one
// worker to name. Engines batch the concurrent calls themselves.
func (s *Server) embedJob(ctx context.Context, req *kvgatev1.EmbedRequest) (*job, *embedding, error) {
	j, err := newJob(ctx, req.GetRequestId(), nil, false)
	if err != nil {
		return nil, nil, err
	}
	if j.route, err = s.route(req.GetModel()); err != nil {
		return nil, nil, err
	}
	text := j.route.Text
	if err := j.route.Placer.embeddings(); err != nil {
		return nil, nil, err
	}
	j.needs = workers.RPCEmbed
	in := req.GetInputs()
	limits := s.admission.cfg
	switch {
	case len(in) == 0:
		return nil, nil, fault.Invalidf("inputs", "inputs is empty; at least 1 input is required")
	case len(in) > limits.MaxEmbedInputs:
		return nil, nil, fault.Invalidf("inputs", "inputs has %d entries; the limit is %d", len(in), limits.MaxEmbedInputs)
	}
	total, texts := 0, 0
	for i, e := range in {
		switch {
		case len(e.GetInputIds()) > 0 && e.GetText() != "":
			return nil, nil, fault.Invalidf(fmt.Sprintf("inputs[%d]", i), "inputs[%d]: input_ids and text are both set; send each input one way", i)
		case len(e.GetInputIds()) == 0 && e.GetText() == "":
			return nil, nil, fault.Invalidf(fmt.Sprintf("inputs[%d]", i), "inputs[%d]: input_ids is empty and text is empty; an input of at least 1 token is required", i)
		case e.GetText() != "" && text == nil:
			return nil, nil, noText(j.route, fmt.Sprintf("inputs[%d].text", i))
		}
		total += len(e.GetInputIds())
		if e.GetText() != "" {
			texts++
		}
	}
	if total > limits.MaxEmbedTokens {
		return nil, nil, fault.Invalidf("inputs", "inputs have %d tokens together; the limit is %d", total, limits.MaxEmbedTokens)
	}
	t := &embedding{s: s, j: j, inputs: make([][]uint32, len(in))}
	if texts == 0 {
		for i, e := range in {
			t.inputs[i] = e.GetInputIds()
		}
		j.inputIDs, j.task = t.inputs[0], t
		return j, t, nil
	}
	// The texts, tokenized in order until the batch's tokens pass the
	// limit: the work done for a batch that is too long is bounded by it.
	var commits []func()
	_, span := s.startStep(ctx, "kvgate.tokenize")
	var lk batchLookup
	for i, e := range in {
		if e.GetText() == "" {
			t.inputs[i] = e.GetInputIds()
			continue
		}
		ids, commit, l, err := encode(text, e.GetText(), true, fmt.Sprintf("inputs[%d].text", i), s.promptContext(j.route))
		if err == nil && len(ids) == 0 {
			err = fault.Invalidf(fmt.Sprintf("inputs[%d].text", i), "inputs[%d].text tokenizes to no tokens; an input of at least 1 token is required", i)
		}
		if total += len(ids); err == nil && total > limits.MaxEmbedTokens {
			err = fault.Invalidf("inputs", "inputs have more than %d tokens together (counted up to inputs[%d]); the limit is %d", limits.MaxEmbedTokens, i, limits.MaxEmbedTokens)
		}
		lk.add(l)
		if err != nil {
			endTokenizeAs(span, lk.label(), total, err)
			return nil, nil, err
		}
		t.inputs[i], commits = ids, append(commits, commit)
	}
	endTokenizeAs(span, lk.label(), total, nil)
	j.inputIDs, j.task = t.inputs[0], t
	j.commit = func() {
		for _, c := range commits {
			c()
		}
	}
	return j, t, nil
}

// batchLookup counts how the tokenizer caches served a batch of texts, for
// the tokenize span: "l0" when every text was an L0 hit, "miss" when none
// was helped by a cache, "mixed" otherwise.
type batchLookup struct{ texts, l0, hits int }

func (b *batchLookup) add(l cache.Lookup) {
	b.texts++
	if l.L0Hit {
		b.l0++
	}
	if l.L0Hit || l.L1HitBytes > 0 {
		b.hits++
	}
}

func (b *batchLookup) label() string {
	switch {
	case b.l0 == b.texts:
		return "l0"
	case b.hits == 0:
		return "miss"
	}
	return "mixed"
}

// embedding is an Embed request: its inputs as token ids, each sent to
// the placed worker with its own engine call, concurrently.
type embedding struct {
	s      *Server
	j      *job
	inputs [][]uint32
	resp   *kvgatev1.EmbedResponse // the answer, once delivered
}

// check refuses inputs the workers cannot take: a token id outside the
// vocabulary, an input longer than the model's context (an embedding has
// no output, so the whole context is the input's).
func (t *embedding) check(l limits) error {
	for i, ids := range t.inputs {
		if l.vocabSize > 0 {
			for k, id := range ids {
				if int(id) >= l.vocabSize {
					return fault.Invalidf(fmt.Sprintf("inputs[%d].input_ids[%d]", i, k), "inputs[%d].input_ids[%d] is %d; token ids must be below the model's vocab_size %d", i, k, id, l.vocabSize)
				}
			}
		}
		if l.maxContext > 0 && len(ids) > l.maxContext {
			return fault.Invalidf(fmt.Sprintf("inputs[%d]", i), "inputs[%d] has %d tokens; the model's context is %d tokens", i, len(ids), l.maxContext)
		}
	}
	return nil
}

// exec embeds every input on the placed worker. The first failure cancels
// the other calls and fails the attempt: a batch is answered whole or
// retried whole. An embedding is a prefill, so its answer counts as its
// first token for --first-token-timeout.
func (t *embedding) exec(actx context.Context, cancel context.CancelCauseFunc, p *plan, id string) attemptResult {
	if d := t.s.cfg.FirstTokenTimeout; d > 0 {
		timer := time.AfterFunc(d, func() { cancel(errFirstTokenTimeout) })
		defer timer.Stop()
	}
	r := attemptResult{out: policy.Outcome{Unreported: true}}
	ctx, stop := context.WithCancelCause(actx)
	defer stop(nil)
	w := p.served()
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
	r.deliver = func(ctx context.Context, p *plan, log *slog.Logger) error {
		t.deliver(ctx, p, log, results)
		return nil
	}
	return r
}

// deliver keeps the response for the handler to return.
func (t *embedding) deliver(ctx context.Context, p *plan, log *slog.Logger, results []*workers.EmbedResult) {
	resp := &kvgatev1.EmbedResponse{RequestId: t.j.id, Worker: p.served().URL(), Usage: &kvgatev1.Usage{}}
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
		"duration", time.Since(t.j.start))
}

package server

import (
	"context"
	"fmt"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/pipeline"
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
	traced(ctx, j)
	if err := r.s.pipe.Run(ctx, j); err != nil {
		return nil, err
	}
	return t.Response(), nil
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
func (s *Server) embedJob(ctx context.Context, req *kvgatev1.EmbedRequest) (*pipeline.Job, *pipeline.Embedding, error) {
	j, err := newJob(ctx, req.GetRequestId(), nil, false)
	if err != nil {
		return nil, nil, err
	}
	if j.Route, err = s.route(req.GetModel()); err != nil {
		return nil, nil, err
	}
	text := j.Route.Text
	if err := j.Route.Placer.Embeddings(); err != nil {
		return nil, nil, err
	}
	j.Needs = workers.RPCEmbed
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
			return nil, nil, noText(j.Route, fmt.Sprintf("inputs[%d].text", i))
		}
		total += len(e.GetInputIds())
		if e.GetText() != "" {
			texts++
		}
	}
	if total > limits.MaxEmbedTokens {
		return nil, nil, fault.Invalidf("inputs", "inputs have %d tokens together; the limit is %d", total, limits.MaxEmbedTokens)
	}
	inputs := make([][]uint32, len(in))
	if texts == 0 {
		for i, e := range in {
			inputs[i] = e.GetInputIds()
		}
		return j, s.pipe.Embedding(j, inputs), nil
	}
	// The texts, tokenized in order until the batch's tokens pass the
	// limit: the work done for a batch that is too long is bounded by it.
	var commits []func()
	_, span := s.startStep(ctx, "kvgate.tokenize")
	var lk batchLookup
	for i, e := range in {
		if e.GetText() == "" {
			inputs[i] = e.GetInputIds()
			continue
		}
		ids, commit, l, err := encode(text, e.GetText(), true, fmt.Sprintf("inputs[%d].text", i), s.promptContext(j.Route))
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
		inputs[i], commits = ids, append(commits, commit)
	}
	endTokenizeAs(span, lk.label(), total, nil)
	t := s.pipe.Embedding(j, inputs)
	j.Commit = func() {
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

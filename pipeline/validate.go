package pipeline

import (
	"fmt"

	"github.com/kvgate/kvgate/answer"
	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/workers"
)

// limits are what a request must fit to succeed on every candidate worker.
type limits struct {
	vocabSize  int // 0: unknown
	maxContext int // 0: unknown
	maxInput   int // the longest prompt accepted (ModelInfo.MaxInputTokens); 0: unknown
}

// limitsOf returns the strictest limits among the healthy workers: a request
// that fits them fits whichever worker the policy picks.
func limitsOf(ws []*workers.Worker) limits {
	var l limits
	for _, w := range ws {
		if !w.Healthy() {
			continue
		}
		info := w.Info()
		if info.VocabSize > 0 && (l.vocabSize == 0 || info.VocabSize < l.vocabSize) {
			l.vocabSize = info.VocabSize
		}
		if info.MaxContextLength > 0 && (l.maxContext == 0 || info.MaxContextLength < l.maxContext) {
			l.maxContext = info.MaxContextLength
		}
		if info.MaxInputTokens > 0 && (l.maxInput == 0 || info.MaxInputTokens < l.maxInput) {
			l.maxInput = info.MaxInputTokens
		}
	}
	return l
}

// validateAgainst checks a prompt against the model's vocabulary and context.
func validateAgainst(ids []uint32, sp *kvgatev1.SamplingParams, l limits) error {
	if len(ids) == 0 {
		return fault.Invalidf("input_ids", "input_ids is empty; a prompt of at least 1 token is required")
	}
	if l.vocabSize > 0 {
		for i, id := range ids {
			if int(id) >= l.vocabSize {
				return fault.Invalidf(fmt.Sprintf("input_ids[%d]", i), "input_ids[%d] is %d; token ids must be below the model's vocab_size %d", i, id, l.vocabSize)
			}
		}
	}
	if l.vocabSize > 0 {
		for i, id := range sp.GetStopTokenIds() {
			if int(id) >= l.vocabSize {
				return fault.Invalidf(fmt.Sprintf("sampling_params.stop_token_ids[%d]", i), "sampling_params.stop_token_ids[%d] is %d; token ids must be below the model's vocab_size %d", i, id, l.vocabSize)
			}
		}
	}
	if n := len(ids); l.maxInput > 0 && n > l.maxInput {
		return fault.Invalidf("input_ids", "the prompt (input_ids) has %d tokens; the engines accept at most %d (their max_req_input_len: "+
			"the smaller of the model's context and the engine's KV cache, less one)", n, l.maxInput)
	}
	if l.maxContext > 0 {
		n := len(ids)
		if n >= l.maxContext {
			return fault.Invalidf("input_ids", "the prompt has %d tokens; the model's context is %d tokens and at least 1 must remain for output", n, l.maxContext)
		}
		if mn := int(sp.GetMinNewTokens()); n+mn > l.maxContext {
			return fault.Invalidf("sampling_params.min_new_tokens", "the prompt (%d tokens) plus sampling_params.min_new_tokens (%d) is %d; the model's context is %d tokens",
				n, mn, n+mn, l.maxContext)
		}
		if mx := sp.GetMaxNewTokens(); sp != nil && sp.MaxNewTokens != nil && n+int(mx) > l.maxContext {
			return fault.Invalidf("sampling_params.max_new_tokens", "the prompt (%d tokens) plus sampling_params.max_new_tokens (%d) is %d; the model's context is %d tokens",
				n, mx, n+int(mx), l.maxContext)
		}
	}
	return nil
}

// toSampling converts the public sampling parameters to the neutral type.
func toSampling(sp *kvgatev1.SamplingParams) workers.Sampling {
	if sp == nil {
		return workers.Sampling{}
	}
	return workers.Sampling{
		Temperature:       sp.Temperature,
		TopP:              sp.TopP,
		TopK:              sp.TopK,
		MinP:              sp.MinP,
		FrequencyPenalty:  sp.FrequencyPenalty,
		PresencePenalty:   sp.PresencePenalty,
		RepetitionPenalty: sp.RepetitionPenalty,
		MaxNewTokens:      sp.MaxNewTokens,
		MinNewTokens:      sp.MinNewTokens,
		StopTokenIDs:      sp.StopTokenIds,
		IgnoreEOS:         sp.IgnoreEos,
		Seed:              sp.Seed,
		Constraint:        answer.SamplingConstraint(sp),
	}
}

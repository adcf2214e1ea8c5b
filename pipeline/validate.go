package pipeline

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/kvgate/kvgate/answer"
	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/workers"
)

// limits are what a request must fit to succeed on a worker.
type limits struct {
	vocabSize  int // 0: unknown
	maxContext int // 0: unknown
	maxInput   int // the longest prompt accepted (ModelInfo.MaxInputTokens); 0: unknown
	// truncates: the engine cuts a prompt beyond maxInput or the context
	// instead of refusing it (ModelInfo.TruncatesPrompts), so no length
	// is refused; maxContext still bounds the answer's size.
	truncates bool
}

// lengthsOf are w's own length limits. The vocabulary is the model's,
// checked once for the fleet (bounds.vocab), so it is left out.
func lengthsOf(w *workers.Worker) limits {
	_, ctx, input, truncates := w.PromptLimits()
	return limits{maxContext: ctx, maxInput: input, truncates: truncates}
}

// bounds are a fleet's limits, among its healthy workers: a request within
// strict fits every one of them, and one beyond loose fits none.
type bounds struct {
	// vocab is the smallest vocabulary (0: none reports one): every worker
	// serves the same model, and a token id beyond one engine's vocabulary
	// is a client's mistake, not a reason to place the request elsewhere.
	vocab         int
	strict, loose limits
	healthy       int
}

// boundsOf reads ws's limits in one pass: a request reads every worker's.
// A worker that reports no limit (0) makes loose unlimited.
func boundsOf(ws []*workers.Worker) bounds {
	tighter := func(cur, n int) int {
		if n > 0 && (cur == 0 || n < cur) {
			return n
		}
		return cur
	}
	var b bounds
	var anyContext, anyInput bool // some worker reports no limit
	b.strict.truncates = true
	for _, w := range ws {
		if !w.Healthy() {
			continue
		}
		b.healthy++
		vocab, ctx, input, truncates := w.PromptLimits()
		b.vocab = tighter(b.vocab, vocab)
		b.strict.maxContext, b.strict.maxInput = tighter(b.strict.maxContext, ctx), tighter(b.strict.maxInput, input)
		b.loose.maxContext, b.loose.maxInput = max(b.loose.maxContext, ctx), max(b.loose.maxInput, input)
		anyContext, anyInput = anyContext || ctx == 0, anyInput || input == 0
		b.strict.truncates, b.loose.truncates = b.strict.truncates && truncates, b.loose.truncates || truncates
	}
	if anyContext {
		b.loose.maxContext = 0
	}
	if anyInput {
		b.loose.maxInput = 0
	}
	return b
}

// fit checks j's lengths against the workers of ws (b, their bounds), the
// engines of one role, whose limits may differ (an SGLang engine with a
// smaller KV cache accepts shorter prompts). It refuses a request that no
// healthy worker would accept, and keeps the workers whose own limits j
// exceeds out of its placements (j.unfit), so that the queue, the policy
// and Explain consider only engines that can run it: sending it to one
// that cannot would fail it there. What it finds, and the role's note in
// j.leftOut, replace an earlier check's of the same role (the fleet may
// have changed since) and leave the other leg's.
func fit(role workers.Role, ws []*workers.Worker, b bounds, j *Job) error {
	j.unfit[role], j.leftOut[role] = nil, ""
	if b.healthy == 0 || j.Task.check(b.strict) == nil {
		return nil
	}
	if err := j.Task.check(b.loose); err != nil {
		return err
	}
	// Within the loosest limits but beyond some worker's own.
	var refusal, why error
	var unfit []string
	fits := 0
	for _, w := range ws {
		err := j.Task.check(lengthsOf(w))
		switch {
		case err == nil:
			if w.Healthy() {
				fits++
			}
			continue
		case refusal == nil && w.Healthy():
			refusal = err
		}
		why = cmp.Or(why, err)
		unfit = append(unfit, w.URL())
	}
	if fits == 0 {
		// Each worker refuses it for a limit another exceeds (a
		// longer context, a shorter input limit).
		return refusal
	}
	j.unfit[role], j.leftOut[role] = unfit, leftOutNote(role, unfit, why)
	return nil
}

// leftOutNote says, for Explain and the request's log, which workers of
// role a prompt was kept from for their limits, and the first one's
// reason. A disaggregated request's notes name their leg.
func leftOutNote(role workers.Role, urls []string, why error) string {
	if len(urls) == 0 {
		return ""
	}
	msg := why.Error()
	if f, ok := fault.As(why); ok {
		msg = f.Msg
	}
	names := strings.Join(urls[:min(len(urls), 3)], ", ")
	if len(urls) > 3 {
		names += fmt.Sprintf(" and %d more", len(urls)-3)
	}
	leg := rolePrefix(role)
	if leg != "" {
		leg += "engines "
	}
	return fmt.Sprintf("%sleft out for their limits: %s (%s)", leg, names, msg)
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
	if l.truncates {
		return nil // the engine cuts the prompt to fit, and max_new_tokens
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

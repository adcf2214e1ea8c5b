package sim

// Log-probabilities. The simulator has no model, so a token's
// log-probability is a deterministic function of its position and id: finite,
// at most zero, the same on every run and both protocols. The alternatives at
// a position are the token itself (the most likely, with its own value) and
// the ids that follow it in the vocabulary, each one nat less likely than the
// one before, so they are distinct, within the vocabulary and sorted most
// likely first.
//
// Only an engine that computed the prompt reports the prompt's: a regular
// engine and a prefill leg do, a decode leg (which received the KV cache)
// does not. Streaming, each chunk carries its tokens' log-probabilities and
// the first chunk the prompt's; the completion carries every output token's
// when not streaming, and the prompt's when no chunk carried them.

// maxTopLogprobs is the most alternatives a request may ask for (vLLM's
// default max_logprobs).
const maxTopLogprobs = 20

// logprobSpec is what a request asked for.
type logprobSpec struct {
	output     bool
	outputTopK int
	prompt     bool
	// promptStart is the first prompt position reported (SGLang's
	// logprob_start_len; 0 for vLLM).
	promptStart int
	promptTopK  int
}

// tokenLogprob is one position's log-probability, in protocol-neutral terms.
type tokenLogprob struct {
	id      uint32
	value   float32
	missing bool // the first prompt token, which has none
	top     []altLogprob
}

type altLogprob struct {
	id    uint32
	value float32
}

// logprobValue is the log-probability of tok at position pos, in
// [-8.192, -0.001].
func logprobValue(pos int, tok uint32) float32 {
	x := mix64(uint64(pos)<<32 ^ uint64(tok) ^ golden)
	return -float32(x%8192+1) / 1000
}

// logprobAt is tok's log-probability at pos with k alternatives.
func logprobAt(pos int, tok uint32, k int, vocab int) tokenLogprob {
	lp := tokenLogprob{id: tok, value: logprobValue(pos, tok)}
	k = min(k, vocab)
	if k > 0 {
		lp.top = make([]altLogprob, k)
		for j := range lp.top {
			lp.top[j] = altLogprob{id: uint32((int(tok) + j) % vocab), value: lp.value - float32(j)}
		}
	}
	return lp
}

// promptLogprobs are the prompt's from position start on; position 0 has no
// value.
func (sp logprobSpec) promptLogprobs(prompt []uint32, vocab int) []tokenLogprob {
	if !sp.prompt || sp.promptStart >= len(prompt) {
		return nil
	}
	out := make([]tokenLogprob, 0, len(prompt)-sp.promptStart)
	for i := sp.promptStart; i < len(prompt); i++ {
		if i == 0 {
			out = append(out, tokenLogprob{id: prompt[0], missing: true})
			continue
		}
		out = append(out, logprobAt(i, prompt[i], sp.promptTopK, vocab))
	}
	return out
}

// outputLogprobs are the output tokens' from index from on, after a prompt
// of n tokens; nil when not asked for.
func (sp logprobSpec) outputLogprobs(n int, out []uint32, from int, vocab int) []tokenLogprob {
	if !sp.output || from >= len(out) {
		return nil
	}
	lps := make([]tokenLogprob, 0, len(out)-from)
	for i := from; i < len(out); i++ {
		lps = append(lps, logprobAt(n+i, out[i], sp.outputTopK, vocab))
	}
	return lps
}

// checkTopK validates a number of alternatives the way vLLM does.
func (e *Engine) checkTopK(field string, k int) error {
	if k < 0 || k > maxTopLogprobs {
		return e.invalid("%s = %d: the simulator reports 0 to %d alternatives", field, k, maxTopLogprobs)
	}
	return nil
}

// Both protocols carry log-probabilities as the same parallel arrays in
// messages of their own; these build the arrays, and the protocol files wrap
// them.

func lpValues(lps []tokenLogprob) []float32 {
	out := make([]float32, len(lps))
	for i, lp := range lps {
		out[i] = lp.value
	}
	return out
}

func lpIDs(lps []tokenLogprob) []uint32 {
	out := make([]uint32, len(lps))
	for i, lp := range lps {
		out[i] = lp.id
	}
	return out
}

// lpWrapped is the prompt's values, each wrapped by wrap (nil for the
// missing first).
func lpWrapped[W any](lps []tokenLogprob, wrap func(*float32) W) []W {
	out := make([]W, len(lps))
	for i := range lps {
		var v *float32
		if !lps[i].missing {
			v = &lps[i].value
		}
		out[i] = wrap(v)
	}
	return out
}

// lpTops are the positions' alternatives, one message (made by mk) per
// position, or none when no position has any.
func lpTops[T any](lps []tokenLogprob, mk func(values []float32, ids []uint32) T) []T {
	has := false
	for _, lp := range lps {
		has = has || len(lp.top) > 0
	}
	if !has {
		return nil
	}
	out := make([]T, len(lps))
	for i, lp := range lps {
		var values []float32
		var ids []uint32
		for _, a := range lp.top {
			values = append(values, a.value)
			ids = append(ids, a.id)
		}
		out[i] = mk(values, ids)
	}
	return out
}

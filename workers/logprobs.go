package workers

// Log-probabilities between the neutral LogprobRequest/Logprob and the
// engines' messages. Both protocols report them the same way (SGLang's and
// vLLM's OutputLogProbs, InputLogProbs and TopLogProbs have the same shape):
// parallel arrays, one entry per token, with the prompt's values wrapped so
// that the first token can have none. What differs is how they are asked
// for; that stays in sglang.go and vllm.go.

import (
	"math"

	"github.com/kvgate/kvgate/fault"
)

// wantLogprobs is r when it asks for anything, nil otherwise.
func wantLogprobs(r *LogprobRequest) *LogprobRequest {
	if r == nil || (!r.Output && !r.Prompt) {
		return nil
	}
	return r
}

// engineTop is one position's alternatives (sglang.TopLogProbs,
// vllm.TopLogProbs).
type engineTop interface {
	GetValues() []float32
	GetTokenIds() []uint32
}

// engineOutputLogprobs is an engine's OutputLogProbs.
type engineOutputLogprobs[T engineTop] interface {
	GetTokenLogprobs() []float32
	GetTokenIds() []uint32
	GetTopLogprobs() []T
}

// outputLogprobs decodes an engine's OutputLogProbs; nil when absent.
func outputLogprobs[T engineTop](engine, where string, m engineOutputLogprobs[T]) ([]Logprob, error) {
	vals := m.GetTokenLogprobs()
	return zipLogprobs(engine, where, len(vals), m.GetTokenIds(), m.GetTopLogprobs(),
		func(i int) (float32, bool) { return vals[i], true })
}

// inputLogprobs decodes an engine's InputLogProbs, whose values are
// wrappers (V) that value unwraps: ok false is a token without a
// log-probability (Missing). nil when absent.
func inputLogprobs[V any, T engineTop](engine, where string, vals []V, ids []uint32, tops []T, value func(V) (float32, bool)) ([]Logprob, error) {
	return zipLogprobs(engine, where, len(vals), ids, tops, func(i int) (float32, bool) { return value(vals[i]) })
}

// zipLogprobs joins n values with their token ids and alternatives. Arrays
// of unequal length, or a value that is not a number, are an engine
// protocol violation (a Corrupt fault), like the other corrupt output the adapters
// and CheckedStream refuse, since the positions can no longer be matched to
// tokens.
func zipLogprobs[T engineTop](engine, where string, n int, ids []uint32, tops []T, value func(int) (float32, bool)) ([]Logprob, error) {
	if n == 0 && len(ids) == 0 && len(tops) == 0 {
		return nil, nil
	}
	if len(ids) != n {
		return nil, malformedLogprobs(engine, where, "%d values for %d token ids", n, len(ids))
	}
	if len(tops) != 0 && len(tops) != n {
		return nil, malformedLogprobs(engine, where, "%d top entries for %d tokens", len(tops), n)
	}
	out := make([]Logprob, n)
	for i := range out {
		v, ok := value(i)
		if ok && math.IsNaN(float64(v)) {
			return nil, malformedLogprobs(engine, where, "token %d has log-probability NaN", i)
		}
		out[i] = Logprob{TokenID: ids[i], Value: v, Missing: !ok}
		if !ok {
			out[i].Value = 0
		}
		if len(tops) == 0 {
			continue
		}
		tv, tid := tops[i].GetValues(), tops[i].GetTokenIds()
		if len(tv) != len(tid) {
			return nil, malformedLogprobs(engine, where, "token %d has %d top values for %d top token ids", i, len(tv), len(tid))
		}
		if len(tv) == 0 {
			continue
		}
		out[i].Top = make([]TopLogprob, len(tv))
		for j := range tv {
			if math.IsNaN(float64(tv[j])) {
				return nil, malformedLogprobs(engine, where, "token %d's alternative %d has log-probability NaN", i, j)
			}
			out[i].Top[j] = TopLogprob{TokenID: tid[j], Value: tv[j]}
		}
	}
	return out, nil
}

func malformedLogprobs(engine, where, format string, args ...any) error {
	return fault.Newf(fault.Corrupt, "%s engine sent malformed %s: "+format, append([]any{engine, where}, args...)...)
}

// withLogprobs finishes decoding an engine message into c: when want asks
// for anything, read decodes the message's log-probabilities, which go on
// the chunk or on its completion, and only what want asked for is kept (an
// engine may report more: SGLang's return_logprob brings the output's with
// the prompt's, and a PD leg must not hand on what it was not asked for).
func withLogprobs(c Chunk, want *LogprobRequest, read func() (out, prompt []Logprob, err error)) (Chunk, bool, error) {
	if want == nil {
		return c, true, nil
	}
	out, prompt, err := read()
	if err != nil {
		return Chunk{}, false, err
	}
	if !want.Output {
		out = nil
	}
	if !want.Prompt {
		prompt = nil
	}
	if c.Final != nil {
		c.Final.Logprobs, c.Final.PromptLogprobs = out, prompt
	} else {
		c.Logprobs, c.PromptLogprobs = out, prompt
	}
	return c, true, nil
}

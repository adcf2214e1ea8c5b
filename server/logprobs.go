package server

import (
	"fmt"
	"strings"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/tokenize/textmodel"
	"github.com/kvgate/kvgate/workers"
)

// maxTopLogprobs bounds sampling_params.top_logprobs, as OpenAI's API does:
// each alternative costs the engine a sort and the response bytes per token.
const maxTopLogprobs = workers.MaxTopLogprobs

// validateLogprobs checks the log-probability fields of sampling_params.
func validateLogprobs(sp *kvgatev1.SamplingParams) error {
	k := sp.GetTopLogprobs()
	if k > maxTopLogprobs {
		return invalid("sampling_params.top_logprobs is %d; the limit is %d", k, maxTopLogprobs)
	}
	if k > 0 && !sp.GetLogprobs() && !sp.GetPromptLogprobs() {
		return invalid("sampling_params.top_logprobs is %d but neither logprobs nor prompt_logprobs is set; set one to receive them", k)
	}
	return nil
}

// checkAnswerSize refuses a request whose answer could be larger than the
// engine connections accept (limit bytes): the engine would compute it,
// and gRPC would refuse it in the router. The output is bounded by
// max_new_tokens, else by what the context leaves (unknown context: not
// counted).
func checkAnswerSize(ids []uint32, sp *kvgatev1.SamplingParams, l limits, limit int) error {
	lp := logprobRequest(sp)
	if lp == nil {
		return nil
	}
	output := 0
	switch {
	case sp.MaxNewTokens != nil:
		output = int(sp.GetMaxNewTokens())
	case l.maxContext > len(ids):
		output = l.maxContext - len(ids)
	}
	n := workers.AnswerBytes(len(ids), output, lp)
	if n <= int64(limit) {
		return nil
	}
	var asked []string
	if lp.Prompt {
		asked = append(asked, fmt.Sprintf("prompt_logprobs for %d prompt tokens", len(ids)))
	}
	if lp.Output {
		asked = append(asked, fmt.Sprintf("logprobs for up to %d output tokens", output))
	}
	return invalid("sampling_params asks for %s at top_logprobs %d, an engine answer of up to %d bytes; "+
		"kvgate accepts at most %d bytes from an engine: lower top_logprobs or max_new_tokens, or shorten the prompt",
		strings.Join(asked, " and "), lp.TopK, n, limit)
}

// logprobRequest is what a request asks the engine for; nil when nothing.
func logprobRequest(sp *kvgatev1.SamplingParams) *workers.LogprobRequest {
	if !sp.GetLogprobs() && !sp.GetPromptLogprobs() {
		return nil
	}
	return &workers.LogprobRequest{Output: sp.GetLogprobs(), Prompt: sp.GetPromptLogprobs(), TopK: int(sp.GetTopLogprobs())}
}

// logprobs converts an engine's log-probabilities to the public message,
// naming each token's text when the router has a tokenizer.
type logprobs struct {
	text *textmodel.Model // nil: ids only
}

func (l logprobs) convert(in []workers.Logprob) []*kvgatev1.TokenLogprob {
	if len(in) == 0 {
		return nil
	}
	out := make([]*kvgatev1.TokenLogprob, len(in))
	for i, lp := range in {
		t := &kvgatev1.TokenLogprob{TokenId: lp.TokenID, Token: l.token(lp.TokenID)}
		if !lp.Missing {
			v := lp.Value
			t.Logprob = &v
		}
		if len(lp.Top) > 0 {
			t.TopLogprobs = make([]*kvgatev1.TopLogprob, len(lp.Top))
			for k, alt := range lp.Top {
				t.TopLogprobs[k] = &kvgatev1.TopLogprob{TokenId: alt.TokenID, Logprob: alt.Value, Token: l.token(alt.TokenID)}
			}
		}
		out[i] = t
	}
	return out
}

// token is one id's text on its own. A byte-level token may hold part of a
// character: its bytes are shown as U+FFFD rather than sent as invalid
// UTF-8, which proto3 strings cannot carry.
func (l logprobs) token(id uint32) string {
	if l.text == nil {
		return ""
	}
	s, err := l.text.Tokenizer().Decode([]uint32{id}, false)
	if err != nil {
		return ""
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

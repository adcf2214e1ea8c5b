package answer

import (
	"fmt"
	"strings"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/tokenize/textmodel"
	"github.com/kvgate/kvgate/workers"
)

// MaxTopLogprobs bounds sampling_params.top_logprobs, as OpenAI's API does:
// each alternative costs the engine a sort and the response bytes per token.
const MaxTopLogprobs = workers.MaxTopLogprobs

// ValidateLogprobs checks the log-probability fields of sampling_params.
func ValidateLogprobs(sp *kvgatev1.SamplingParams) error {
	k := sp.GetTopLogprobs()
	if k > MaxTopLogprobs {
		return fault.Invalidf("sampling_params.top_logprobs", "sampling_params.top_logprobs is %d; the limit is %d", k, MaxTopLogprobs)
	}
	if k > 0 && !sp.GetLogprobs() && !sp.GetPromptLogprobs() {
		return fault.Invalidf("sampling_params.top_logprobs", "sampling_params.top_logprobs is %d but neither logprobs nor prompt_logprobs is set; set one to receive them", k)
	}
	return nil
}

// CheckSize refuses a request whose answer could be larger than the
// engine connections accept (limit bytes): the engine would compute it,
// and gRPC would refuse it in the router. The output is bounded by
// max_new_tokens, else by what a context of maxContext tokens leaves (0,
// unknown: not counted).
func CheckSize(ids []uint32, sp *kvgatev1.SamplingParams, maxContext, limit int) error {
	lp := LogprobRequest(sp)
	if lp == nil {
		return nil
	}
	output := 0
	switch {
	case sp.MaxNewTokens != nil:
		output = int(sp.GetMaxNewTokens())
	case maxContext > len(ids):
		output = maxContext - len(ids)
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
	return fault.Invalidf("sampling_params", "sampling_params asks for %s at top_logprobs %d, an engine answer of up to %d bytes; "+
		"kvgate accepts at most %d bytes from an engine: lower top_logprobs or max_new_tokens, or shorten the prompt",
		strings.Join(asked, " and "), lp.TopK, n, limit)
}

// LogprobRequest is what a request asks the engine for; nil when nothing.
func LogprobRequest(sp *kvgatev1.SamplingParams) *workers.LogprobRequest {
	if !sp.GetLogprobs() && !sp.GetPromptLogprobs() {
		return nil
	}
	return &workers.LogprobRequest{Output: sp.GetLogprobs(), Prompt: sp.GetPromptLogprobs(), TopK: int(sp.GetTopLogprobs())}
}

// Logprobs converts an engine's log-probabilities to the public message,
// naming each token's text when the router has a tokenizer.
type Logprobs struct {
	// Token is one id's text on its own; nil: ids only.
	Token func(id uint32) (string, error)
}

// TokenText is Logprobs.Token through tm's tokenizer; nil when tm is
// (no tokenizer).
func TokenText(tm *textmodel.Model) func(id uint32) (string, error) {
	if tm == nil {
		return nil
	}
	tok := tm.Tokenizer()
	return func(id uint32) (string, error) { return tok.Decode([]uint32{id}, false) }
}

// Convert converts in; nil when it is empty.
func (l Logprobs) Convert(in []workers.Logprob) []*kvgatev1.TokenLogprob {
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

// token is one id's text. A byte-level token may hold part of a character:
// its bytes are shown as U+FFFD rather than sent as invalid UTF-8, which
// proto3 strings cannot carry.
func (l Logprobs) token(id uint32) string {
	if l.Token == nil {
		return ""
	}
	s, err := l.Token(id)
	if err != nil {
		return ""
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

package answer

import (
	"fmt"
	"sync"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/workers"
)

// DefaultMaxLogprobBytes is the default of --max-logprob-bytes:
// 64 MiB of log-probabilities on the engines' wire, room for the largest
// answer the engine connections accept (workers.DefaultMaxAnswerBytes) and
// seven 40,000-token prompts at top_logprobs 20 at once. The router holds
// such an answer many times over while it converts it (one message per
// entry, with the token's text): scripts/attack.sh's row 1 measured about
// 100 MB of RSS per such request in flight (737 MB for seven), so the
// default keeps them under 1 GB together.
const DefaultMaxLogprobBytes = 64 << 20

// Budget bounds the log-probability bytes that requests in flight
// may receive from the engines. Admission counts requests, and most cost
// the router a few kilobytes; one asking for every prompt position's top
// alternatives costs it tens of megabytes, so a thousand admitted at once
// would take gigabytes. Each such request takes its weight from the budget
// for as long as it runs, or is refused at once with RESOURCE_EXHAUSTED:
// like the queue's, the refusal is cheap and names the limit. A request
// heavier than the whole budget could never run: INVALID_ARGUMENT.
type Budget struct {
	limit   int64  // <= 0: no limit
	refused func() // counts a refusal

	mu   sync.Mutex
	used int64
}

// NewBudget bounds the log-probability bytes of requests in flight to
// limit (<= 0: no limit); refused, when set, is called on each refusal,
// for the router's count of them.
func NewBudget(limit int64, refused func()) *Budget {
	if refused == nil {
		refused = func() {}
	}
	return &Budget{limit: limit, refused: refused}
}

// Take reserves the weight of a request of ids asking sp; release gives it
// back. A request that asks for no log-probabilities weighs nothing.
func (b *Budget) Take(ids []uint32, sp *kvgatev1.SamplingParams) (release func(), err error) {
	n := logprobBytes(ids, sp)
	if n == 0 || b.limit <= 0 {
		return func() {}, nil
	}
	if n > b.limit {
		b.refused()
		return nil, fault.Invalidf("sampling_params",
			"the log-probabilities asked for (%s) may take %d bytes, more than kvgate allows for all requests in flight together (%d, --max-logprob-bytes): ask for fewer",
			describeLogprobs(ids, sp), n, b.limit)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		b.refused()
		return nil, fault.Newf(fault.Busy,
			"requests in flight already hold %d of the %d bytes of log-probabilities kvgate allows (--max-logprob-bytes), and this one may take %d; retry later",
			b.used, b.limit, n)
	}
	b.used += n
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			b.used -= n
			b.mu.Unlock()
		})
	}, nil
}

// logprobBytes is the part of an engine's answer that the request's
// log-probabilities may take on the wire: every prompt position with
// prompt_logprobs, and up to max_new_tokens output positions with logprobs.
// Without max_new_tokens the output's part is not counted: it arrives token
// by token, at the pace of decoding, and the context bounds it.
func logprobBytes(ids []uint32, sp *kvgatev1.SamplingParams) int64 {
	lp := LogprobRequest(sp)
	if lp == nil {
		return 0
	}
	output := int(sp.GetMaxNewTokens())
	return workers.AnswerBytes(len(ids), output, lp) - workers.AnswerBytes(len(ids), output, nil)
}

// describeLogprobs names what sp asks for, for a refusal's message.
func describeLogprobs(ids []uint32, sp *kvgatev1.SamplingParams) string {
	switch {
	case sp.GetPromptLogprobs() && sp.GetLogprobs():
		return fmt.Sprintf("prompt_logprobs for %d prompt tokens and logprobs for up to %d output tokens at top_logprobs %d", len(ids), sp.GetMaxNewTokens(), sp.GetTopLogprobs())
	case sp.GetPromptLogprobs():
		return fmt.Sprintf("prompt_logprobs for %d prompt tokens at top_logprobs %d", len(ids), sp.GetTopLogprobs())
	default:
		return fmt.Sprintf("logprobs for up to %d output tokens at top_logprobs %d", sp.GetMaxNewTokens(), sp.GetTopLogprobs())
	}
}

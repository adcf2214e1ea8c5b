package pipeline

import (
	"slices"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// contract is what a request allows the engine to generate, checked by the
// router on every token it relays: engines that drop max_new_tokens or
// stop_token_ids exist (some modes of vLLM-compatible servers ignore
// max_tokens), and their extra tokens must never reach the client nor its
// bill. Stop strings need no check here: the router's detokenizer matches
// them itself (relay.stopped). EOS is left to the engine: which ids end a
// sequence is its generation config's, which the router does not see.
type contract struct {
	maxNew  int // 0: no limit the router knows
	minNew  int // stop ids before this many tokens do not stop
	stopIDs []uint32
}

func newContract(sp *kvgatev1.SamplingParams) contract {
	c := contract{minNew: int(sp.GetMinNewTokens()), stopIDs: sp.GetStopTokenIds()}
	if sp != nil && sp.MaxNewTokens != nil {
		c.maxNew = int(*sp.MaxNewTokens)
	}
	return c
}

// end is where the contract ends the output when ids arrive after have
// tokens: keep is how many of ids the client may see (len(ids) when the
// output goes on), and finish is "" (not ended), "length" or "stop" with the
// matched stop id.
func (c contract) end(have int, ids []uint32) (keep int, finish string, matched *uint32) {
	keep = len(ids)
	if c.maxNew > 0 && have+keep >= c.maxNew {
		keep, finish = max(c.maxNew-have, 0), "length"
	}
	if len(c.stopIDs) > 0 {
		for i := max(c.minNew-have, 0); i < keep; i++ {
			if slices.Contains(c.stopIDs, ids[i]) {
				id := ids[i]
				return i + 1, "stop", &id
			}
		}
	}
	return keep, finish, nil
}

package policy_test

import (
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestComputesPromptPredictsNothingCached: an engine computes the whole
// prompt of a request that asks for the prompt's log-probabilities
// (Request.ComputesPrompt), cached or not. Both cache-aware policies, in
// the threshold rule, still send it where its prefix is (the engine stores
// the prompt's pages there, as for any request; the wait mode's case is in
// waitCases), predict nothing cached, and charge the whole
// prompt's prefill; the same prompt without it is predicted cached, but for
// its last page (72 tokens: four whole pages and a part).
func TestComputesPromptPredictsNothingCached(t *testing.T) {
	prompt := caTokens(1, 72)
	for _, tc := range []struct {
		name string
		// selector places prompt on w0 first, then selects req among ws.
		selector func(t *testing.T, ws []*workers.Worker) func(req *policy.Request) policy.Decision
	}{
		{"cache_aware", func(t *testing.T, ws []*workers.Worker) func(*policy.Request) policy.Decision {
			p := newCA(t, nil)
			place(t, p, ws[0], prompt)
			return func(req *policy.Request) policy.Decision { return caSelectReq(t, p, req, ws) }
		}},
		{"vllm_cache_aware", func(t *testing.T, ws []*workers.Worker) func(*policy.Request) policy.Decision {
			p := newVCA(t, nil)
			vcaPlace(t, p, ws[0], prompt)
			return func(req *policy.Request) policy.Decision { return vcaSelect(t, p, req, ws...) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := fleet(2)
			sel := tc.selector(t, ws)
			for _, c := range []struct {
				computes           bool
				predicted, prefill int
			}{{false, 64, 8}, {true, 0, 72}} {
				d := sel(&policy.Request{InputIDs: prompt, ComputesPrompt: c.computes, DryRun: true})
				wantDecision(t, d, ws[0], "cache_hit", c.predicted)
				if got := d.PrefillTokens(len(prompt)); got != c.prefill {
					t.Errorf("ComputesPrompt %v: prefill charged %d tokens, want %d", c.computes, got, c.prefill)
				}
			}
		})
	}
}

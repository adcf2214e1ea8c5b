package server_test

import (
	"testing"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestSpeculativeCountsReachUsageAndMetrics: an engine's speculative
// decoding counts (GenerateComplete spec_draft_tokens, spec_accepted_tokens)
// reach the client's usage and the per-worker counters. The simulated engine
// proposes 3 draft tokens a step and accepts 1, so 8 tokens take 4 steps:
// 12 drafts, 4 accepted.
func TestSpeculativeCountsReachUsageAndMetrics(t *testing.T) {
	for _, tt := range []struct {
		name, protocol          string
		draftsPerStep           int
		wantDraft, wantAccepted uint32
	}{
		{"sglang", "sglang", 3, 12, 4},
		{"vllm", "vllm", 3, 12, 4},
		{"no speculation", "sglang", 0, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: tt.protocol, workers: 1,
				sim: func(_ int, c *sim.Config) { c.SpecDraftTokens = tt.draftsPerStep }})
			u := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(3, 16),
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(8), IgnoreEos: true}}).complete.GetUsage()
			if u.GetSpecDraftTokens() != tt.wantDraft || u.GetSpecAcceptedTokens() != tt.wantAccepted {
				t.Errorf("usage: %d draft, %d accepted tokens; want %d, %d", u.GetSpecDraftTokens(), u.GetSpecAcceptedTokens(), tt.wantDraft, tt.wantAccepted)
			}
			if got := counter(t, f, "kvgate_worker_spec_draft_tokens_total"); got != float64(tt.wantDraft) {
				t.Errorf("kvgate_worker_spec_draft_tokens_total = %v, want %d", got, tt.wantDraft)
			}
			if got := counter(t, f, "kvgate_worker_spec_accepted_tokens_total"); got != float64(tt.wantAccepted) {
				t.Errorf("kvgate_worker_spec_accepted_tokens_total = %v, want %d", got, tt.wantAccepted)
			}
		})
	}
}

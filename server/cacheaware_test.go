package server_test

import (
	"context"
	"strings"
	"testing"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/workers/sim"
)

// converse runs a multi-turn conversation: each turn's prompt is the previous
// prompt, the previous reply and a new user message. It returns each turn's
// completion.
func converse(t *testing.T, f *fleet, turns int) []*kvgatev1.GenerateComplete {
	t.Helper()
	var out []*kvgatev1.GenerateComplete
	history := prompt(100, 200) // a 200-token system prompt and first question
	for turn := range turns {
		c := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: history,
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(20), IgnoreEos: true, Seed: i32(int32(turn))}}).complete
		out = append(out, c)
		history = append(append(history, c.OutputIds...), prompt(uint32(500+40*turn), 40)...)
	}
	return out
}

func TestConversationStaysOnItsWorkerAndItsCacheGrows(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 3, policy: "cache_aware", sim: func(_ int, c *sim.Config) { c.PageSize = 16 }})
	turns := converse(t, f, 6)
	for i, c := range turns[1:] {
		prev := turns[i]
		if c.Worker != turns[0].Worker {
			t.Fatalf("turn %d went to %s, turn 1 to %s", i+2, c.Worker, turns[0].Worker)
		}
		if c.Usage.CachedTokens <= prev.Usage.CachedTokens {
			t.Fatalf("turn %d: cached_tokens %d, not above turn %d's %d", i+2, c.Usage.CachedTokens, i+1, prev.Usage.CachedTokens)
		}
		// The engine holds the previous prompt and reply (but its last token),
		// whole pages only.
		if want := (prev.Usage.PromptTokens + prev.Usage.CompletionTokens - 1) / 16 * 16; c.Usage.CachedTokens != want {
			t.Errorf("turn %d: cached_tokens %d, want %d", i+2, c.Usage.CachedTokens, want)
		}
	}
	// The tree mirrors the engine, replies included: every prediction was exact.
	obs := counter(t, f, "kvgate_cache_prediction_observations_total")
	exact := counter(t, f, "kvgate_cache_prediction_exact_total")
	if obs != float64(len(turns)) || exact != obs {
		t.Fatalf("%v of %v predictions exact over %d turns; want all", exact, obs, len(turns))
	}
}

// TestPromptLogprobsPredictedUncached: the engine computes the whole prompt
// of a request for the prompt's log-probabilities, cached or not, and the
// router predicts as much. The prompt, 72 tokens, is four whole pages and a
// part: its repeat is cached but for the part, and then, asking for the
// prompt's log-probabilities, not at all. Every prediction is exact.
func TestPromptLogprobsPredictedUncached(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 2, policy: "cache_aware", sim: func(_ int, c *sim.Config) { c.PageSize = 16 }})
	ids := prompt(100, 72)
	for i, step := range []struct {
		promptLogprobs bool
		cached         uint32
	}{{false, 0}, {false, 64}, {true, 0}} {
		c := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: ids,
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1), PromptLogprobs: step.promptLogprobs}}).complete
		if c.Usage.CachedTokens != step.cached {
			t.Fatalf("request %d (prompt_logprobs %v): cached_tokens %d, want %d", i+1, step.promptLogprobs, c.Usage.CachedTokens, step.cached)
		}
	}
	obs := counter(t, f, "kvgate_cache_prediction_observations_total")
	exact := counter(t, f, "kvgate_cache_prediction_exact_total")
	if obs != 3 || exact != obs {
		t.Fatalf("%v of %v predictions exact; want all 3", exact, obs)
	}
}

func TestRoundRobinScattersTheConversation(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 3, policy: "round_robin", sim: func(_ int, c *sim.Config) { c.PageSize = 16 }})
	turns := converse(t, f, 6)
	grew := 0
	for i, c := range turns[1:] {
		if c.Usage.CachedTokens > turns[i].Usage.CachedTokens {
			grew++
		}
	}
	if turns[1].Worker == turns[0].Worker || grew == len(turns)-1 {
		t.Fatalf("round_robin kept the conversation together: workers %s, %s; cache grew on %d of %d turns",
			turns[0].Worker, turns[1].Worker, grew, len(turns)-1)
	}
}

func TestExplainDecidesWithoutDispatching(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 3, policy: "cache_aware", text: true, sim: func(_ int, c *sim.Config) { c.PageSize = 16 }})
	req := &kvgatev1.GenerateRequest{InputIds: prompt(10, 100), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}}
	served := f.mustGenerate(t, req).complete.Worker
	requests := func() (n uint64) {
		for _, s := range f.sims {
			n += s.Engine().Stats().Requests
		}
		return n
	}
	before := requests()
	for range 2 { // twice: a dry run changes nothing
		resp, err := f.admin.Explain(context.Background(), &kvgatev1.ExplainRequest{
			Request: &kvgatev1.ExplainRequest_Generate{Generate: req}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Worker != served || resp.Branch != "cache_hit" || resp.Policy != "cache_aware" ||
			resp.PredictedCachedTokens != 96 || resp.PromptTokens != 100 || len(resp.Workers) != 3 {
			t.Fatalf("explain = %v; want cache_hit on %s predicting 96 tokens", resp, served)
		}
		for _, w := range resp.Workers {
			want := uint32(0)
			if w.Address == served {
				want = 96
			}
			if w.MatchedTokens != want {
				t.Errorf("%s: matched %d, want %d", w.Address, w.MatchedTokens, want)
			}
		}
	}
	// A new prompt is a miss; explaining it must not teach the tree.
	fresh := &kvgatev1.GenerateRequest{InputIds: prompt(1500, 64)}
	resp, err := f.admin.Explain(context.Background(), &kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Generate{Generate: fresh}})
	if err != nil || resp.Branch != "cache_miss" {
		t.Fatalf("explain fresh prompt: %v, %v; want a cache_miss", resp, err)
	}
	again, _ := f.admin.Explain(context.Background(), &kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Generate{Generate: fresh}})
	if again.GetBranch() != "cache_miss" {
		t.Fatalf("a second explain of the fresh prompt says %q: the first one inserted it", again.GetBranch())
	}
	if got := requests(); got != before {
		t.Fatalf("explain dispatched %d requests", got-before)
	}

	chat, err := f.admin.Explain(context.Background(), &kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Chat{
		Chat: &kvgatev1.ChatRequest{Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "hi"}}}}})
	if err != nil || chat.PromptTokens == 0 || !strings.HasPrefix(chat.Worker, "grpc://") {
		t.Fatalf("explain chat: %v, %v", chat, err)
	}
	if _, err := f.admin.Explain(context.Background(), &kvgatev1.ExplainRequest{}); err == nil {
		t.Fatal("explain of nothing succeeded")
	}
}

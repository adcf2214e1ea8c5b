package policy_test

import (
	"errors"
	"testing"

	"github.com/kvgate/kvgate/policy"
)

// TestVllmCacheAwareObserveIgnoresDryRun: a dry run (Explain) was never
// sent, so its outcome records nothing.
func TestVllmCacheAwareObserveIgnoresDryRun(t *testing.T) {
	prompt, reply := caTokens(1, 64), caTokens(2, 33)
	ws := fleet(1)
	p := newVCA(t, nil)
	req := &policy.Request{InputIDs: prompt, DryRun: true}
	d := vcaSelect(t, p, req, ws[0])
	p.Observe(req, d, policy.Outcome{OutputIDs: reply})
	next := caJoin(prompt, reply[:32], caTokens(3, 20))
	if got := vcaSelect(t, p, &policy.Request{InputIDs: next, DryRun: true}, ws[0]).PredictedCachedTokens; got != 0 {
		t.Fatalf("after a dry run's outcome, predicted %d cached, want 0", got)
	}
}

// TestVllmCacheAwareMissCauses: vllm_cache_aware counts its misses by the
// causes cache_aware's do. Its index does not tell blocks the engine's
// events confirmed from those a decision recorded, so a report below the
// prediction is evicted (or queued, on an engine already at its running
// limit), never speculation. The prompt is 80 tokens, 5 blocks, all held:
// the engine computes the last again (see reusable), so 64 are predicted.
func TestVllmCacheAwareMissCauses(t *testing.T) {
	tests := []struct {
		name        string
		reported    int
		limit, load int    // the engine's running-request limit (0: none reported), and its load at the decision
		outcome     error  // the request's failure
		want        string // "" : exact, nothing counted
	}{
		{"exact", 64, 0, 0, nil, ""},
		{"blocks evicted", 48, 0, 0, nil, "evicted"},
		{"blocks evicted, placed on a full engine", 48, 2, 2, nil, "queued"},
		{"blocks evicted, the engine had room", 48, 2, 1, nil, "evicted"},
		{"a partial block reported", 40, 0, 0, nil, "boundary"},
		{"the whole block-aligned prompt reported cached", 80, 0, 0, nil, "boundary"},
		{"more than the prompt", 96, 0, 0, nil, "over_report"},
		{"a failure that never ran", 0, 0, 0, errors.New("refused"), ""},
		{"a failure after admission", 48, 0, 0, errors.New("reset"), "evicted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := limitedFleet(tt.limit)[0]
			p := newVCA(t, nil)
			prompt := caTokens(1, 80)
			vcaPlace(t, p, w, prompt)
			release := busy(w, tt.load)
			req := &policy.Request{InputIDs: prompt}
			d := vcaSelect(t, p, req, w)
			release()
			if d.PredictedCachedTokens != 64 {
				t.Fatalf("decision predicted %d, want 64", d.PredictedCachedTokens)
			}
			p.Observe(req, d, policy.Outcome{CachedTokens: tt.reported, Err: tt.outcome})
			total := 0
			for _, n := range p.PredictionMisses() {
				total += int(n)
			}
			if want := map[bool]int{true: 0, false: 1}[tt.want == ""]; total != want || tt.want != "" && p.PredictionMisses()[tt.want] != 1 {
				t.Fatalf("misses %v, want one %q", p.PredictionMisses(), tt.want)
			}
		})
	}
}

// TestVllmCacheAwareUnseenMiss: the engine held more than the index knew
// (another router's traffic, events not applied yet).
func TestVllmCacheAwareUnseenMiss(t *testing.T) {
	w := limitedFleet(0)[0]
	p := newVCA(t, nil)
	req := &policy.Request{InputIDs: caTokens(1, 80)}
	d := vcaSelect(t, p, req, w)
	p.Observe(req, d, policy.Outcome{CachedTokens: 48})
	if got := p.PredictionMisses()["unseen"]; got != 1 {
		t.Fatalf("misses %v, want one unseen", p.PredictionMisses())
	}
}

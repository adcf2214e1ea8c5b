package policy_test

import (
	"testing"

	"github.com/kvgate/kvgate/policy"
)

// TestCacheAwareMissCauses: each prediction that misses the engine's report
// is counted under the cause that explains it, from what the decision knew
// (its prediction and the part of it the engine's KV events had confirmed)
// and the report. The worker has KV events; the prompt is 80 tokens (five
// pages) unless said, and the engine's events confirmed its first
// `confirmed` tokens before the decision, the router speculated the rest.
func TestCacheAwareMissCauses(t *testing.T) {
	tests := []struct {
		name      string
		prompt    int // tokens
		confirmed int // tokens confirmed by events before the decision
		predicted int // what the decision must predict (checked)
		reported  int
		want      string // "" : exact, nothing counted
	}{
		{"exact", 80, 80, 80, 80, ""},
		{"speculative pages missing", 80, 32, 80, 32, "speculation"},
		{"speculative pages and less missing", 80, 32, 80, 16, "evicted"},
		{"confirmed pages evicted", 80, 80, 80, 48, "evicted"},
		{"engine held more", 80, 0, 0, 48, "unseen"},
		{"partial page reported", 80, 80, 80, 40, "boundary"},
		{"last page of a page-aligned prompt", 80, 80, 80, 64, "boundary"},
		{"last whole page of a prompt that goes on", 90, 80, 80, 64, "evicted"},
		{"more than the prompt", 80, 80, 80, 96, "over_report"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := fleet(1)
			w := ws[0]
			p := newCA(t, nil)
			p.SetKVEventMode(w.URL(), true)
			prompt := caTokens(1, tt.prompt)
			if tt.confirmed > 0 {
				p.ApplyKVEvents(w.URL(), batch(0, engineChain(prompt[:tt.confirmed], 16, 100, nil)...))
			}
			if tt.predicted > tt.confirmed {
				place(t, p, w, prompt) // the router's own, speculative insert
			}
			req := &policy.Request{InputIDs: prompt}
			d := caSelect(t, p, prompt, w)
			if d.PredictedCachedTokens != tt.predicted || d.Confirmed.Of(w.URL()) != tt.confirmed {
				t.Fatalf("decision predicted %d (%d confirmed), want %d (%d)", d.PredictedCachedTokens, d.Confirmed.Of(w.URL()), tt.predicted, tt.confirmed)
			}
			p.Observe(req, d, policy.Outcome{CachedTokens: tt.reported, OutputIDs: caTokens(9, 4)})
			total := 0
			for cause, n := range p.PredictionMisses() {
				total += int(n)
				if n != 0 && cause != tt.want {
					t.Errorf("counted %d under %q, want %q", n, cause, tt.want)
				}
			}
			if want := map[bool]int{true: 0, false: 1}[tt.want == ""]; total != want {
				t.Fatalf("%d misses counted, want %d (%q): %v", total, want, tt.want, p.PredictionMisses())
			}
			if tt.want != "" && p.PredictionMisses()[tt.want] != 1 {
				t.Fatalf("misses %v, want one %q", p.PredictionMisses(), tt.want)
			}
		})
	}
}

package policy_test

import (
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestCacheAwareMissCauses: each prediction that misses the engine's report
// is counted under the cause that explains it, from what the decision knew
// (its prediction and the part of it the engine's KV events had confirmed)
// and the report. The worker has KV events; the prompt is 88 tokens (five
// pages and 8 tokens) unless said, and the engine's events confirmed its first
// `confirmed` tokens before the decision, the router speculated the rest.
// A request placed on an engine already running its limit of requests
// (limit, with load requests in flight on it at the decision) waits in the
// engine's queue, where the requests admitted before it evict: a shortfall
// is counted as "queued" there, whatever the router knew.
func TestCacheAwareMissCauses(t *testing.T) {
	tests := []struct {
		name        string
		prompt      int // tokens
		confirmed   int // tokens confirmed by events before the decision
		predicted   int // what the decision must predict (checked)
		reported    int
		limit, load int    // the engine's running-request limit (0: none reported), and its load at the decision
		want        string // "" : exact, nothing counted
	}{
		{"exact", 88, 80, 80, 80, 0, 0, ""},
		{"speculative pages missing", 88, 32, 80, 32, 0, 0, "speculation"},
		{"speculative pages and less missing", 88, 32, 80, 16, 0, 0, "evicted"},
		{"confirmed pages evicted", 88, 80, 80, 48, 0, 0, "evicted"},
		{"engine held more", 88, 0, 0, 48, 0, 0, "unseen"},
		{"partial page reported", 88, 80, 80, 40, 0, 0, "boundary"},
		{"a page-aligned prompt: its last page computed again", 80, 80, 64, 64, 0, 0, ""},
		{"a page-aligned prompt reported cached whole", 80, 80, 64, 80, 0, 0, "boundary"},
		{"last whole page of a prompt that goes on", 90, 80, 80, 64, 0, 0, "evicted"},
		{"more than the prompt", 88, 80, 80, 96, 0, 0, "over_report"},
		{"confirmed pages evicted, placed on a full engine", 88, 80, 80, 48, 2, 2, "queued"},
		{"speculative pages missing, placed on a full engine", 88, 32, 80, 32, 2, 3, "queued"},
		{"confirmed pages evicted, the engine had room", 88, 80, 80, 48, 2, 1, "evicted"},
		{"confirmed pages evicted, the engine reports no limit", 88, 80, 80, 48, 0, 5, "evicted"},
		{"engine held more, placed on a full engine", 88, 0, 0, 48, 2, 2, "unseen"},
		{"exact on a full engine", 88, 80, 80, 80, 2, 2, ""},
		{"a page-aligned prompt reported cached whole, placed on a full engine", 80, 80, 64, 80, 2, 2, "boundary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := workers.NewWorker("grpc://127.0.0.1:9000", workers.ProtocolSGLang, workers.RoleRegular,
				workers.ModelInfo{MaxRunningRequests: tt.limit}, nil, nil)
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
			release := busy(w, tt.load)
			d := caSelect(t, p, prompt, w)
			release()
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

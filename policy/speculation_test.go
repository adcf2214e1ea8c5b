package policy_test

import (
	"context"
	"testing"
	"time"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestCacheAwareReplySpeculationExpires checks the expiry of a completed
// request's speculative insert on a worker with KV events: its prompt and
// its reply (kept as two slices, joined only in the tree) expire together
// where the engine confirmed nothing, and what the engine confirmed stays.
// The prompt is not whole pages, so a page spans prompt and reply.
func TestCacheAwareReplySpeculationExpires(t *testing.T) {
	prompt, out := caTokens(1, 40), caTokens(2, 42)
	whole := caJoin(prompt, out[:41]) // the engine keeps the output but its last token: 81 tokens, 5 pages
	cases := []struct {
		name      string
		confirmed []uint32 // the pages the engine's events stored
		want      int      // tokens of whole the worker holds after expiry
	}{
		{"nothing confirmed", nil, 0},
		{"the prompt's pages confirmed", whole[:32], 32},
		{"prompt and reply confirmed", whole[:80], 80},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws := fleet(1)
			w := ws[0]
			p := newCA(t, func(o *policy.Options) { o.CacheAware.SpeculativeTTL = time.Second })
			p.SetKVEventMode(w.URL(), true)
			req := &policy.Request{InputIDs: prompt}
			d, err := p.Select(context.Background(), req, workers.Views(ws))
			if err != nil {
				t.Fatal(err)
			}
			p.Observe(req, d, policy.Outcome{CachedTokens: d.PredictedCachedTokens, OutputIDs: out})
			if len(c.confirmed) > 0 {
				p.ApplyKVEvents(w.URL(), batch(0, engineChain(c.confirmed, 16, 100, nil)...))
			}
			if got := caExplain(t, p, whole, w).Matched.Of(w.URL()); got != 80 {
				t.Fatalf("before expiry: matched %d, want 80 (prompt and reply)", got)
			}
			policy.ExpireSpeculations(p, time.Now().Add(2*time.Second))
			if got := caExplain(t, p, whole, w).Matched.Of(w.URL()); got != c.want {
				t.Fatalf("after expiry: matched %d, want %d", got, c.want)
			}
		})
	}
}

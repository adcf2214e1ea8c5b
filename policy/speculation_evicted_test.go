package policy_test

import (
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestCacheAwareOutcomeDoesNotResurrectEvictedPages: on a worker with KV
// events, a completed request's prompt and reply are expected in the
// engine's cache (speculatively, for events still on their way), but not
// the pages the engine's events already said it evicted after the
// decision: a full engine often evicts a finished request's pages before
// its answer reaches the router, and predicting them for the
// conversation's next turn is a miss. The prompt is 4 pages, the reply
// (but its last token) 2 more; the engine's events, applied before the
// outcome, are the row's.
func TestCacheAwareOutcomeDoesNotResurrectEvictedPages(t *testing.T) {
	prompt := caTokens(1, 64)
	reply := caTokens(2, 33) // its first 32 tokens fill pages 5 and 6
	seq := caJoin(prompt, reply[:32])
	tests := []struct {
		name   string
		events func() [][]workers.KVEvent
		want   int // the next turn's prediction on the worker
	}{
		{"events still on their way", func() [][]workers.KVEvent { return nil }, 96},
		{"prompt and reply stored", func() [][]workers.KVEvent {
			return [][]workers.KVEvent{engineChain(seq, 16, 100, nil)}
		}, 96},
		{"reply stored then evicted", func() [][]workers.KVEvent {
			return [][]workers.KVEvent{engineChain(seq, 16, 100, nil), {removed(105, 104)}}
		}, 64},
		{"prompt tail evicted before the reply was stored", func() [][]workers.KVEvent {
			return [][]workers.KVEvent{engineChain(prompt, 16, 100, nil), {removed(103)}}
		}, 48},
		{"everything evicted", func() [][]workers.KVEvent {
			return [][]workers.KVEvent{engineChain(seq, 16, 100, nil), {removed(105, 104, 103, 102, 101, 100)}}
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := fleet(1)
			w := ws[0]
			p := newCA(t, nil)
			p.SetKVEventMode(w.URL(), true)
			req := &policy.Request{InputIDs: prompt}
			d := caSelect(t, p, prompt, w)
			for i, evs := range tt.events() {
				p.ApplyKVEvents(w.URL(), batch(uint64(i), evs...))
			}
			p.Observe(req, d, policy.Outcome{CachedTokens: d.PredictedCachedTokens, OutputIDs: reply})
			next := caJoin(seq, caTokens(3, 20))
			if got := caExplain(t, p, next, w).PredictedCachedTokens; got != tt.want {
				t.Fatalf("next turn predicted %d cached, want %d", got, tt.want)
			}
		})
	}
}

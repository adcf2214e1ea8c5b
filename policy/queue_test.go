package policy_test

import (
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestPredictsQueuedEngineKeepsOnlyHeldPages, for cache_aware and
// vllm_cache_aware (pages are blocks of 16 tokens to both): on an engine whose
// last load poll reported requests waiting in its own queue, a request sent
// now waits there while the ones admitted before it evict every page no
// running request holds, so the prediction keeps only the part of the match
// that a request of ours in flight on it shares. The engine's events hold
// a system prompt (4 pages) and a conversation's history (2 pages); the
// next turn matches both. The routing is the same in every row, and so is
// the prefill the worker is charged for: only the prediction changes.
//
// An engine at its running limit whose KV has room keeps what it holds
// while requests queue for a running place: those ahead of ours fill the
// room first. There the rule applies only when the queue ahead, each
// request the size of this prompt, needs at least the KV the running
// requests leave free. Below its limit, an engine's queue waits for KV;
// an engine that reports neither limit nor KV size is taken the same way.
func TestPredictsQueuedEngineKeepsOnlyHeldPages(t *testing.T) {
	sys, hist := caTokens(1, 64), caTokens(2, 32)
	next := caJoin(sys, hist, caTokens(4, 20))       // 116 tokens; a queue of 2 needs 232
	queued := workers.Load{Waiting: 2}               // no limit or KV size reported
	held := [][]uint32{caJoin(sys, caTokens(3, 32))} // shares the system prompt
	tests := []struct {
		name     string
		load     workers.Load // the engine's last poll
		inFlight [][]uint32   // prompts placed on it, outcome not yet seen
		ended    bool         // their outcomes arrived before the next turn
		never    bool         // they were abandoned (Decision.Abandoned) instead
		want     int
	}{
		{"engine not queueing: the whole match", workers.Load{}, held, false, false, 96},
		{"queueing: what a request in flight shares", queued, held, false, false, 64},
		{"queueing: the longest of several shares", queued,
			[][]uint32{caTokens(5, 48), caJoin(sys[:32], caTokens(6, 40)), caJoin(sys, hist[:16], caTokens(7, 16))}, false, false, 80},
		{"queueing: a request of the same conversation holds it all", queued, [][]uint32{caJoin(sys, hist, caTokens(3, 40))}, false, false, 96},
		{"queueing, nothing in flight: nothing", queued, nil, false, false, 0},
		{"queueing, the requests in flight have ended: nothing", queued, held, true, false, 0},
		{"queueing, the requests placed were never sent: nothing", queued, held, false, true, 0},
		{"below its running limit, queueing for KV: what is held",
			workers.Load{Waiting: 2, Running: 3, MaxRunning: 8, UsedTokens: 100, MaxTotalTokens: 1000}, held, false, false, 64},
		{"at its running limit, KV room for the queue ahead: the whole match",
			workers.Load{Waiting: 2, Running: 8, MaxRunning: 8, UsedTokens: 100, MaxTotalTokens: 1000}, held, false, false, 96},
		{"at its running limit, the queue ahead needs just the room left: what is held",
			workers.Load{Waiting: 2, Running: 8, MaxRunning: 8, UsedTokens: 768, MaxTotalTokens: 1000}, held, false, false, 64},
		{"at its running limit, less room than the queue ahead needs: what is held",
			workers.Load{Waiting: 2, Running: 8, MaxRunning: 8, UsedTokens: 900, MaxTotalTokens: 1000}, held, false, false, 64},
	}
	for _, pol := range eventPolicies {
		for _, tt := range tests {
			t.Run(pol.name+"/"+tt.name, func(t *testing.T) {
				w := fleet(1)[0]
				p := pol.new(t)
				p.SetKVEventMode(w.URL(), true)
				p.ApplyKVEvents(w.URL(), batch(0, engineChain(caJoin(sys, hist), 16, 100, nil)...))
				var placed []policy.Decision
				for _, ids := range tt.inFlight {
					placed = append(placed, caSelectReq(t, p, &policy.Request{InputIDs: ids}, []*workers.Worker{w}))
				}
				if tt.ended {
					for i, d := range placed {
						p.Observe(&policy.Request{InputIDs: tt.inFlight[i]}, d, policy.Outcome{CachedTokens: d.PredictedCachedTokens})
					}
				}
				if tt.never {
					for _, d := range placed {
						d.Abandoned()
					}
				}
				w.SetEngineLoad(tt.load)
				d := caSelectReq(t, p, &policy.Request{InputIDs: next, DryRun: true}, []*workers.Worker{w})
				if got := d.PredictedCachedTokens; got != tt.want {
					t.Fatalf("predicted %d cached, want %d", got, tt.want)
				}
				if got := d.Matched.Of(w.URL()); got != 96 {
					t.Fatalf("the policy's match is %d, want 96 whatever the queue", got)
				}
				if got, want := d.PrefillTokens(len(next)), len(next)-96; got != want {
					t.Fatalf("the worker is charged %d tokens of prefill, want %d: the prompt less the match it was routed by", got, want)
				}
			})
		}
	}
}

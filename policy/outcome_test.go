package policy_test

import (
	"errors"
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// eventPolicy is a cache-aware policy whose engines report KV events, as
// the tests of what both learn from outcomes drive it.
type eventPolicy interface {
	policy.Policy
	policy.Observer
	SetKVEventMode(worker string, on bool)
	ApplyKVEvents(worker string, b *workers.KVEventBatch)
}

// eventPolicies are the policies those tests specify, each in the
// threshold mode, as its other tests build it.
var eventPolicies = []struct {
	name string
	new  func(*testing.T) eventPolicy
}{
	{"cache_aware", func(t *testing.T) eventPolicy { return newCA(t, nil) }},
	{"vllm_cache_aware", func(t *testing.T) eventPolicy { return newVCA(t, nil) }},
}

// TestOutcomeRecordsReplyNotEvictedPages, for cache_aware and
// vllm_cache_aware on a worker with KV events: a completed request's reply
// joins its prompt in the policy's view of the engine's cache, so the
// conversation's next turn, which repeats it, is predicted whole even
// before the engine's stored events for the reply arrive; but not the
// pages the engine's events removed after the decision (a full engine
// often evicts a finished request's pages before its answer reaches the
// router), nor anything for a reply that completes no page, a failed
// request or a draining worker. The prompt is 4 pages, the reply (but its
// last token) 2 more; the engine's events, applied before the outcome,
// and the outcome are the row's.
func TestOutcomeRecordsReplyNotEvictedPages(t *testing.T) {
	prompt := caTokens(1, 64)
	reply := caTokens(2, 33) // its first 32 tokens fill pages 5 and 6
	seq := caJoin(prompt, reply[:32])
	done := policy.Outcome{CachedTokens: 0, OutputIDs: reply}
	tests := []struct {
		name    string
		events  [][]workers.KVEvent
		outcome policy.Outcome
		drain   bool
		want    int // the next turn's prediction on the worker
	}{
		{name: "events still on their way", outcome: done, want: 96},
		{name: "prompt and reply stored", events: [][]workers.KVEvent{engineChain(seq, 16, 100, nil)},
			outcome: done, want: 96},
		{name: "reply stored then evicted", events: [][]workers.KVEvent{engineChain(seq, 16, 100, nil), {removed(105, 104)}},
			outcome: done, want: 64},
		{name: "second reply page evicted", events: [][]workers.KVEvent{engineChain(seq, 16, 100, nil), {removed(105)}},
			outcome: done, want: 80},
		{name: "prompt tail evicted before the reply was stored", events: [][]workers.KVEvent{engineChain(prompt, 16, 100, nil), {removed(103)}},
			outcome: done, want: 48},
		{name: "everything evicted", events: [][]workers.KVEvent{engineChain(seq, 16, 100, nil), {removed(105, 104, 103, 102, 101, 100)}},
			outcome: done, want: 0},
		{name: "a reply that completes no page", outcome: policy.Outcome{OutputIDs: reply[:10]}, want: 64},
		{name: "a failed request", outcome: policy.Outcome{OutputIDs: reply, Err: errors.New("stream reset")}, want: 64},
		{name: "a draining worker", outcome: done, drain: true, want: 64},
	}
	for _, pol := range eventPolicies {
		for _, tt := range tests {
			t.Run(pol.name+"/"+tt.name, func(t *testing.T) {
				w := fleet(1)[0]
				p := pol.new(t)
				p.SetKVEventMode(w.URL(), true)
				req := &policy.Request{InputIDs: prompt}
				d := caSelectReq(t, p, req, []*workers.Worker{w})
				for i, evs := range tt.events {
					p.ApplyKVEvents(w.URL(), batch(uint64(i), evs...))
				}
				if tt.drain {
					w.SetDraining(true)
				}
				p.Observe(req, d, tt.outcome)
				w.SetDraining(false)
				next := caJoin(seq, caTokens(3, 20))
				if got := caSelectReq(t, p, &policy.Request{InputIDs: next, DryRun: true}, []*workers.Worker{w}).PredictedCachedTokens; got != tt.want {
					t.Fatalf("next turn predicted %d cached, want %d", got, tt.want)
				}
			})
		}
	}
}

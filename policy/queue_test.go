package policy_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestPredictsQueuedEngineKeepsOnlyHeldPages, for cache_aware and
// vllm_cache_aware (pages are blocks of 16 tokens to both): on an engine whose
// last load poll reported requests waiting in its own queue, a request sent
// now waits there while the ones admitted before it evict every page no
// running request holds, so the prediction keeps only the part of the match
// that a request of ours running on it then shares: one of the newest in
// flight, as many as the engine runs (at its running limit, any in flight;
// no request has ended on the engine here, so none counts by how lately it
// was placed: see the next test).
// The engine's events hold a system prompt (4 pages) and a conversation's
// history (2 pages); the next turn matches both. The routing is the same
// in every row, and so is the prefill the worker is charged for: only the
// prediction changes.
//
// An engine at its running limit queues for a running place: the requests
// ahead of ours fill the KV its running requests leave free, then evict
// least recently used first. Where a request that held the match ended on
// it lately (the conversation's previous turn, its reply included), the
// match is lost when the KV added there since (the prefill charged, the
// replies of requests that ended), plus the prefill of the requests queued
// ahead (the newest in flight, as many as wait), reaches the free KV.
// Where none did, the rule is the coarse one: the queue ahead, each
// request the size of this prompt, needs at least the free KV. Below its
// limit, an engine's queue waits for KV; an engine that reports neither
// limit nor KV size is taken the same way.
func TestPredictsQueuedEngineKeepsOnlyHeldPages(t *testing.T) {
	sys, hist := caTokens(1, 64), caTokens(2, 32)
	next := caJoin(sys, hist, caTokens(4, 20))       // 116 tokens; a queue of 2 needs 232
	queued := workers.Load{Waiting: 2, Running: 4}   // no limit or KV size reported
	held := [][]uint32{caJoin(sys, caTokens(3, 32))} // shares the system prompt; charged 32
	prev := caJoin(sys, hist, caTokens(8, 8))        // the previous turn: charged 8
	other := caTokens(9, 80)                         // shares nothing: charged 80
	atLimit := func(used int) workers.Load {
		return workers.Load{Waiting: 2, Running: 8, MaxRunning: 8, UsedTokens: used, MaxTotalTokens: 1000}
	}
	tests := []struct {
		name     string
		load     workers.Load // the engine's last poll
		before   [][]uint32   // prompts placed on it and ended, in order, before inFlight
		reply    []uint32     // the output of before's last request
		inFlight [][]uint32   // prompts placed on it, outcome not yet seen
		ended    bool         // their outcomes arrived before the next turn
		never    bool         // they were abandoned (Decision.Abandoned) instead
		want     int
	}{
		{"engine not queueing: the whole match", workers.Load{}, nil, nil, held, false, false, 96},
		{"queueing: what a request in flight shares", queued, nil, nil, held, false, false, 64},
		{"queueing: the longest of several shares", queued, nil, nil,
			[][]uint32{caTokens(5, 48), caJoin(sys[:32], caTokens(6, 40)), caJoin(sys, hist[:16], caTokens(7, 16))}, false, false, 80},
		{"queueing: a request of the same conversation holds it all", queued, nil, nil, [][]uint32{caJoin(sys, hist, caTokens(3, 40))}, false, false, 96},
		{"queueing, nothing in flight: nothing", queued, nil, nil, nil, false, false, 0},
		{"queueing, the requests in flight have ended: nothing", queued, nil, nil, held, true, false, 0},
		{"queueing, the requests placed were never sent: nothing", queued, nil, nil, held, false, true, 0},
		{"queueing, the engine runs nothing: nothing", workers.Load{Waiting: 2}, nil, nil, held, false, false, 0},
		{"queueing, the request sharing the match placed last, as many as run: what it holds",
			workers.Load{Waiting: 1, Running: 1}, nil, nil, [][]uint32{other, held[0]}, false, false, 64},
		{"queueing, the request sharing the match placed before as many as run: it will have ended, nothing",
			workers.Load{Waiting: 1, Running: 1}, nil, nil, [][]uint32{held[0], other}, false, false, 0},
		{"below its running limit, queueing for KV: what is held",
			workers.Load{Waiting: 2, Running: 3, MaxRunning: 8, UsedTokens: 100, MaxTotalTokens: 1000}, nil, nil, held, false, false, 64},
		{"at its running limit, KV room for the queue ahead: the whole match", atLimit(100), nil, nil, held, false, false, 96},
		{"at its running limit, the queue ahead needs just the room left: what is held", atLimit(768), nil, nil, held, false, false, 64},
		{"at its running limit, less room than the queue ahead needs: what is held", atLimit(900), nil, nil, held, false, false, 64},
		{"at its running limit, less room than the queue ahead needs: what a request in flight holds, placed before as many as run too",
			workers.Load{Waiting: 1, Running: 1, MaxRunning: 1, UsedTokens: 900, MaxTotalTokens: 1000}, nil, nil,
			[][]uint32{held[0], other}, false, false, 64},
		{"at its running limit, the match used lately, the prefill since and ahead fits: the whole match",
			atLimit(900), [][]uint32{prev}, nil, held, false, false, 96}, // 32 since, 32 ahead; 100 free
		{"at its running limit, the match used lately, the prefill since and ahead fills the room: what is held",
			atLimit(936), [][]uint32{prev}, nil, held, false, false, 64}, // 64 free
		{"at its running limit, the prefill of requests ended since counts: what is held",
			atLimit(900), [][]uint32{prev, other}, nil, held, false, false, 64}, // 80 + 32 since, 32 ahead
		{"at its running limit, the output of requests ended since counts: what is held",
			atLimit(860), [][]uint32{prev, other[:40]}, other[40:], held, false, false, 64}, // 40 + 39 + 32 since, 32 ahead; 140 free
		{"at its running limit, prefill charged before the match was last used does not count: the whole match",
			atLimit(900), [][]uint32{other, prev}, nil, held, false, false, 96},
		{"at its running limit, the match runs into the reply of the turn before: the whole match",
			atLimit(900), [][]uint32{caJoin(sys, hist[:16])}, caJoin(hist[16:], caTokens(8, 1)), held, false, false, 96},
	}
	for _, pol := range eventPolicies {
		for _, tt := range tests {
			t.Run(pol.name+"/"+tt.name, func(t *testing.T) {
				w := fleet(1)[0]
				p := pol.new(t)
				p.SetKVEventMode(w.URL(), true)
				p.ApplyKVEvents(w.URL(), batch(0, engineChain(caJoin(sys, hist), 16, 100, nil)...))
				for i, ids := range tt.before {
					d := caSelectReq(t, p, &policy.Request{InputIDs: ids}, []*workers.Worker{w})
					o := policy.Outcome{CachedTokens: d.PredictedCachedTokens}
					if i == len(tt.before)-1 {
						o.OutputIDs = tt.reply
					}
					p.Observe(&policy.Request{InputIDs: ids}, d, o)
				}
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

// TestPredictsQueuedEngineKeepsPagesOfRequestsPlacedLately, for both
// policies: on an engine queueing for KV, a request of ours placed there
// lately still runs when the engine admits the next one, even when newer
// ones outnumber what the engine runs; lately is within youngHold (0.6) of
// the engine's mean request duration, learned from requests that ended
// there. The sharing request is placed first and another after it; the
// engine runs one and queues one, so the sharing request counts only by
// its age. The clock is synctest's.
func TestPredictsQueuedEngineKeepsPagesOfRequestsPlacedLately(t *testing.T) {
	sys, hist := caTokens(1, 64), caTokens(2, 32)
	next := caJoin(sys, hist, caTokens(4, 20))
	held := caJoin(sys, caTokens(3, 32)) // shares the system prompt, 64 tokens
	other := caTokens(9, 80)
	tests := []struct {
		name string
		mean time.Duration // the engine's mean request duration; 0: none ended yet
		age  time.Duration // how long before the decision held was placed
		want int
	}{
		{"no request ended there: only the newest as many as run", 0, time.Second, 0},
		{"placed half a mean request ago: what it holds", 10 * time.Second, 5 * time.Second, 64},
		{"placed just within 0.6 of a mean request ago: what it holds", 10 * time.Second, 6*time.Second - time.Millisecond, 64},
		{"placed 0.7 of a mean request ago: it will have ended, nothing", 10 * time.Second, 7 * time.Second, 0},
	}
	for _, pol := range eventPolicies {
		for _, tt := range tests {
			t.Run(pol.name+"/"+tt.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					w := fleet(1)[0]
					if tt.mean > 0 {
						release := w.Acquire()
						time.Sleep(tt.mean)
						release()
					}
					p := pol.new(t)
					p.SetKVEventMode(w.URL(), true)
					p.ApplyKVEvents(w.URL(), batch(0, engineChain(caJoin(sys, hist), 16, 100, nil)...))
					caSelectReq(t, p, &policy.Request{InputIDs: held}, []*workers.Worker{w})
					time.Sleep(tt.age)
					caSelectReq(t, p, &policy.Request{InputIDs: other}, []*workers.Worker{w})
					w.SetEngineLoad(workers.Load{Waiting: 1, Running: 1})
					d := caSelectReq(t, p, &policy.Request{InputIDs: next, DryRun: true}, []*workers.Worker{w})
					if got := d.PredictedCachedTokens; got != tt.want {
						t.Fatalf("predicted %d cached, want %d", got, tt.want)
					}
				})
			})
		}
	}
}

// TestMissedPredictionLogsTheEnginesPoll: a prediction that missed is logged
// at debug level with what tells which rule made it: the match the policy
// routed by beside the prediction, and the engine's last load poll as the
// prediction read it (here a queue below the running limit with 100 tokens
// free, which cut the 96-token match to the 64 a request in flight shares,
// where the engine reported it all).
func TestMissedPredictionLogsTheEnginesPoll(t *testing.T) {
	sys, hist := caTokens(1, 64), caTokens(2, 32)
	next := caJoin(sys, hist, caTokens(4, 20))
	for _, name := range []string{"cache_aware", "vllm_cache_aware"} {
		t.Run(name, func(t *testing.T) {
			var log bytes.Buffer
			o := policy.DefaultOptions()
			o.CacheAware.Mode, o.VllmCacheAware.Mode = policy.ModeThreshold, policy.ModeThreshold
			o.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
			pol, err := policy.New(name, o)
			if err != nil {
				t.Fatal(err)
			}
			p := pol.(eventPolicy)
			w := fleet(1)[0]
			p.SetKVEventMode(w.URL(), true)
			p.ApplyKVEvents(w.URL(), batch(0, engineChain(caJoin(sys, hist), 16, 100, nil)...))
			caSelectReq(t, p, &policy.Request{InputIDs: caJoin(sys, caTokens(3, 32))}, []*workers.Worker{w})
			w.SetEngineLoad(workers.Load{Waiting: 2, Running: 4, MaxRunning: 8, UsedTokens: 900, MaxTotalTokens: 1000})
			req := &policy.Request{InputIDs: next}
			d := caSelectReq(t, p, req, []*workers.Worker{w})
			p.Observe(req, d, policy.Outcome{CachedTokens: 96})
			for _, want := range []string{`msg="cache prediction missed"`, "matched=96 predicted=64",
				"engine_running=4 engine_waiting=2 engine_free_tokens=100"} {
				if !strings.Contains(log.String(), want) {
					t.Errorf("the debug log lacks %q:\n%s", want, log.String())
				}
			}
		})
	}
}

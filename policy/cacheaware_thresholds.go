package policy

import (
	"cmp"
	"fmt"
	"sync/atomic"

	"github.com/kvgate/kvgate/workers"
)

// Thresholds are the settings of cache_aware's routing rule in force: the
// cache threshold and the balance thresholds, absolute and relative. A
// router serving many models may set them per model; this says which hold.
func (c *CacheAware) Thresholds() (cache float64, abs int, rel float64) {
	return c.threshold, c.absThreshold, c.relThreshold
}

// allReportCapacity reports whether every candidate's engine says how many
// requests it runs at once. Loads compare as shares of those limits only
// then: a share of one worker against a count of another means nothing,
// and the absolute rule alone (SMG's) judges such a fleet.
func allReportCapacity(ws []workers.View) bool {
	for _, w := range ws {
		if w.MaxRunningRequests() <= 0 {
			return false
		}
	}
	return true
}

// shareCmp compares workers i and j by load as a share of their
// running-request limits (−1, 0, +1), exactly, by cross-multiplying.
func (s *snapshot) shareCmp(i, j int) int {
	return cmp.Compare(s.loads[i]*s.ws[j].MaxRunningRequests(), s.loads[j]*s.ws[i].MaxRunningRequests())
}

// leastShare returns the worker of least load share (the earlier on ties).
func (s *snapshot) leastShare() int {
	low := 0
	for i := range s.ws {
		if s.shareCmp(i, low) < 0 {
			low = i
		}
	}
	return low
}

// share is worker i's load as a share of its running-request limit: past 1
// its engine queues what it is sent.
func (s *snapshot) share(i int) float64 {
	return float64(s.loads[i]) / float64(s.ws[i].MaxRunningRequests())
}

// capacityImbalanced applies the capacity rule to s (every candidate
// reports its limit): the fleet is imbalanced when the most and the least
// loaded shares differ by BalanceCapacityThreshold or more and the larger
// is over BalanceRelThreshold × the smaller.
//
// The absolute rule waits for a difference of at least
// BalanceAbsThreshold/2 requests (32 by default), which engines that run 2
// or 8 requests at once never reach while they serve well: on 4 engines of
// 2 slots the cached engine took 42% of an agentic trace, its queue in
// front of a cache hit costing more than the miss elsewhere, and p90 and
// p99 ended worse than round_robin's. With the default threshold of 1,
// an engine of 2 slots holding 2 requests against an idle one is
// imbalanced: a request sent there would wait for a whole request to
// finish, where the idle engine starts it at once. On engines of 256 slots
// the absolute rule fires first, as before.
func (c *CacheAware) capacityImbalanced(s *snapshot) {
	hi, lo := 0, s.leastShare()
	for i := range s.ws {
		if s.shareCmp(i, hi) > 0 {
			hi = i
		}
	}
	s.minShare, s.maxShare = s.share(lo), s.share(hi)
	if s.maxShare-s.minShare >= c.capThreshold && s.maxShare > c.relThreshold*s.minShare {
		s.imbalanced, s.byCapacityFired = true, true
	}
}

// seedIdle applies the start-up rule to s once sizes holds the tokens the
// tree holds for each least loaded candidate: while a candidate is idle and
// holds nothing, the fleet is imbalanced as soon as any worker carries two
// requests, and the request goes to an idle one (ties among the least
// loaded go to the smaller tree, so to one that holds nothing). Like the
// capacity rule it holds where every candidate reports its running-request
// limit and that rule is on; elsewhere SMG's rule alone judges.
//
// A worker that holds nothing has no conversation whose cache a move
// would lose, and a fleet with one idle is starting up or has just grown.
// The balance rules wait for a lead past the gap, at least
// BalanceAbsThreshold/2 (32 by default) to ride out the swings of
// in-flight counts, and meanwhile the first worker to hold a burst's shared
// system prompt took every request: 33 of 128 conversations on 8 workers,
// twice its share, kept for the whole conversation (load CoV 0.58 in
// bench's multiturn at 128 users). A floor of 8 spread that burst but
// moved conversations where each wave of turns begins (15 against 1 at a
// mean of 4.5): at 256 users hit rate 0.914–0.921 against 0.926, load CoV
// 0.11–0.17 against 0.016. With this rule every worker
// comes to hold the system prompt within the burst's first requests, and
// equal matches then spread the rest by load.
func (c *CacheAware) seedIdle(s *snapshot, sizes []int) {
	if !s.byCapacity || s.imbalanced || s.min != 0 || s.max < 2 {
		return
	}
	for i := range s.ws {
		if s.loads[i] == 0 && sizes[i] == 0 {
			s.imbalanced, s.seeding = true, true
			return
		}
	}
}

// noteBacklogs reads, once the absolute rule has found the fleet imbalanced
// where every candidate reports its running-request limit, what keepsCache
// needs: each worker's prefill backlog (prompt tokens sent whose first
// token has not come back) and whether a request sent there would wait for
// a running place (at its limit, or its engine's queue not empty).
func (s *snapshot) noteBacklogs() {
	s.swing = true
	s.backlog, s.waits = make([]int, len(s.ws)), make([]bool, len(s.ws))
	for i, w := range s.ws {
		s.backlog[i] = w.PendingPrefill()
		s.waits[i] = s.loads[i] >= w.MaxRunningRequests() || w.EngineQueued() > 0
	}
}

// keepsCache reports whether a request the absolute rule would move off
// best, the worker of its longest match (which passes the cache threshold),
// stays there instead: best has a running place free and no engine queue,
// and its prefill backlog exceeds the least loaded worker's by no more
// than the tokens the move would recompute. The request then starts as
// soon as it would elsewhere, and its cache saves what a move would spend.
//
// In-flight counts swing: on a starved machine (the bench's client
// goroutines slow under load) one engine of 256 slots carried 34 requests
// against 1 on another while each held 32 conversations, all of them
// decoding, and the absolute rule moved conversations off their caches
// mid-run; the least loaded engine took each one until the verdict turned,
// making the next imbalance (load CoV 0.25–0.58, hit rate 0.82–0.90,
// against 0.016 and 0.926 on a quiet machine). A hot spot is where a
// request would wait, and that is what this asks. Engines that report no
// limit, or a fleet with the capacity rule off, keep SMG's rule as it is.
func (s *snapshot) keepsCache(best int, threshold float64) bool {
	if !s.swing || best < 0 || best == s.least || s.ratio < threshold || s.waits[best] {
		return false
	}
	cost := s.matched[best] - s.matched[s.least]
	if s.backlog[best]-s.backlog[s.least] > cost {
		return false
	}
	s.kept, s.moveCost = true, cost
	return true
}

// keptReason completes a cache_hit's reason when keepsCache kept it.
func (s *snapshot) keptReason() string {
	b := s.chosen
	return fmt.Sprintf("; loads %d..%d differ by more than %d, but %s is below its running-request limit and its prefill backlog (%d tokens) is within the %d a move would recompute",
		s.min, s.max, s.gap, s.ws[b].URL(), s.backlog[b], s.moveCost)
}

// picks counts the threshold mode's selections of one worker, and the
// prompt tokens each inserted into the tree for it. They change only in
// decide, under the tree's write lock, so one selection's count and
// tokens belong together; snapshots read them without the lock.
type picks struct{ n, tokens atomic.Int64 }

// pickCount is picks as read at one moment.
type pickCount struct{ n, tokens int64 }

// picksNow reads every worker's picks.
func (x *workerIndex) picksNow() []pickCount {
	p := make([]pickCount, len(x.picks))
	for i := range x.picks {
		p[i] = pickCount{x.picks[i].n.Load(), x.picks[i].tokens.Load()}
	}
	return p
}

// pick counts a selection of worker i that inserted tokens into the tree.
func (x *workerIndex) pick(i, tokens int) {
	x.picks[i].n.Add(1)
	x.picks[i].tokens.Add(int64(tokens))
}

// refresh adds to s's loads and tree sizes the selections decided since
// the snapshot was read, and reports whether there were any (the verdict
// must then be judged again). It runs in decide, under the tree's write
// lock, after the selections it adds.
//
// A snapshot is read before the tree lock is taken, and a selection adds
// to its worker's load only once it returns. On a starved machine dozens
// of selections waited for the lock holding the same snapshot, and each
// then chose the same worker: 16 of them in a row went to the one worker
// that snapshot saw as least loaded, 22 first turns where the fleet held
// 7 each, and the fleet stayed so for the whole conversation (bench's
// multiturn at 256 users: load CoV 0.15–0.56 in 2 of 5 runs on a loaded
// machine, 0.000–0.016 on a quiet one).
func (s *snapshot) refresh() bool {
	if s.picked == nil {
		return false
	}
	stale := false
	for i := range s.picked {
		p := &s.x.picks[i]
		n, tokens := p.n.Load()-s.picked[i].n, p.tokens.Load()-s.picked[i].tokens
		if n > 0 {
			s.loads[i] += int(n)
			s.sizes[i] += int(tokens)
			stale = true
		}
	}
	return stale
}

package policy

import (
	"cmp"
	"fmt"
	"math"
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
	if !s.byCapacity || s.imbalanced {
		return
	}
	if idle, _ := idleEmpty(s.loads, func(i int) int { return sizes[i] }); idle >= 0 {
		s.imbalanced, s.seeding = true, true
	}
}

// seedBusy is the load the busiest worker must carry before the start-up
// rule sends a request to an idle worker that holds nothing.
const seedBusy = 2

// idleEmpty is the start-up rule's test, which the threshold rule
// (seedIdle) and the wait mode (waitChoice.seed) share: idle is the first
// worker that carries no request and of which the policy's index holds
// nothing (held(i) == 0), when the busiest carries at least seedBusy, and
// -1 otherwise; busiest is the busiest worker's load, for the reason.
func idleEmpty(loads []int, held func(i int) int) (idle, busiest int) {
	idle = -1
	for i, l := range loads {
		busiest = max(busiest, l)
		if idle < 0 && l == 0 && held(i) == 0 {
			idle = i
		}
	}
	if busiest < seedBusy {
		idle = -1
	}
	return idle, busiest
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

// pickLogSize is how many of the latest selections a candidate list's log
// holds (a power of two, for the ring's index). A selection reads those
// decided since its snapshot; this many or more means it waited for the
// tree lock behind as many others, and it then reads the loads afresh
// (see refresh). On a starved machine dozens
// waited; the log, 8 KB, is built with each candidate list's index.
const pickLogSize = 1024

// pickLog is the latest selections, in order: the worker's position in
// the candidate list and the prompt tokens the selection inserted into the
// tree for it. A snapshot notes one number,
// the selections logged so far (now); decide adds those logged since
// (since). Per-worker counters would cost every selection a copy of them
// all to learn of the few decided meanwhile: 13% of a selection's CPU,
// and 164 KB against 99, at 4,000 workers.
//
// The log belongs to the candidate list's index (see indexCache): a
// selection over another list, such as a retry's that excludes a worker,
// starts a log of its own, and the next over the whole fleet another.
//
// Only decide appends, under the tree's write lock, so appends are
// ordered; the entries are atomic because a dry run (Explain) reads them
// without that lock.
type pickLog struct {
	next atomic.Uint64              // selections ever logged
	ring [pickLogSize]atomic.Uint64 // worker<<32 | tokens
}

// now is the number of selections logged so far.
func (l *pickLog) now() uint64 { return l.next.Load() }

// add logs a selection of worker i that inserted tokens into the tree.
// The caller holds the tree's write lock.
func (l *pickLog) add(i, tokens int) {
	n := l.next.Load()
	l.ring[n%pickLogSize].Store(uint64(i)<<32 | uint64(uint32(min(tokens, math.MaxUint32))))
	l.next.Store(n + 1)
}

// since calls f for every selection logged from number from on, and
// reports whether it could: false when the log has since dropped some of
// them (f may then have seen entries of later selections instead).
func (l *pickLog) since(from uint64, f func(i, tokens int)) bool {
	end := l.next.Load()
	if end-from >= pickLogSize {
		return false
	}
	for n := from; n < end; n++ {
		e := l.ring[n%pickLogSize].Load()
		f(int(e>>32), int(uint32(e)))
	}
	// Append number from+pickLogSize overwrites from's entry; an append
	// reads next first, so next read after the entries says whether one
	// began meanwhile (only a dry run's read, without the lock, races one).
	return l.next.Load() < from+pickLogSize
}

// refresh adds to s's loads and tree sizes the selections decided since
// the snapshot was read, and reports whether there were any (the verdict
// must then be judged again). It runs in decide, under the tree's write
// lock, after the selections it adds (a dry run's without the lock: it
// only reads).
//
// A snapshot is read before the tree lock is taken, and a selection adds
// to its worker's load only once it returns. On a starved machine dozens
// of selections waited for the lock holding the same snapshot, and each
// then chose the same worker: 16 of them in a row went to the one worker
// that snapshot saw as least loaded, 22 first turns where the fleet held
// 7 each, and the fleet stayed so for the whole conversation (bench's
// multiturn at 256 users: load CoV 0.15–0.56 in 2 of 5 runs on a loaded
// machine, 0.000–0.016 on a quiet one).
//
// When the log no longer holds them all (pickLogSize selections or more
// passed this one), the loads are read afresh instead: with the pending
// counts they count every selection decided since the snapshot (those of
// callers that say when they acquire; see pendingPick), as the log
// would have. The tree sizes stay the snapshot's (they cannot be read
// under the lock): they only order equal loads and choose the
// smallest_tree fallback.
//
// The wait mode prices a worker by its load and its prefill queue, and a
// burst herded the same way: at 128 conversations on 8 engines of 256
// slots, dozens of first turns in a row went to one engine, all priced at
// the same queue (bench's multiturn: load CoV 0.22–0.83 in 2 of 4 runs).
// Its selections are logged too, and each logged since adds its prompt
// tokens to compute to its worker's queue as well (see rereadWaitLoads
// for a selection past the log); so do the cost mode's, which herded
// alike.
func (s *snapshot) refresh() bool {
	if s.x.log.now() == s.logged {
		return false
	}
	ok := s.x.log.since(s.logged, func(i, tokens int) {
		s.loads[i]++
		if s.sizes[i] >= 0 {
			s.sizes[i] += tokens
		}
		if s.costLoads != nil {
			s.costLoads[i].queue += tokens
		}
		if s.waitLoads != nil {
			s.waitLoads[i].load++
			s.waitLoads[i].queue += tokens
		}
	})
	if !ok {
		s.readLoads()
		if s.costLoads != nil {
			rereadCostQueues(s.costLoads, s.ws, s.queued())
		}
		if s.waitLoads != nil {
			rereadWaitLoads(s.waitLoads, s.ws, s.loads, s.queued())
		}
	}
	return true
}

// readLoads reads each candidate's load, with the decisions its worker
// does not count yet (see pendingPick; the cost and wait modes add their
// prompts to the queues in costLoads).
func (s *snapshot) readLoads() {
	if s.x.pending.all.Load() == 0 {
		// None is pending now, so each decision logged before the
		// snapshot's number is in its worker's load already, and the
		// others are in the log: no per-worker count to read.
		for i, w := range s.ws {
			s.loads[i] = w.Load()
		}
		return
	}
	for i, w := range s.ws {
		// The pending count first: a decision acquired between the two
		// reads counts twice, never not at all.
		s.loads[i] = int(s.x.pending.per[i].Load())
		s.loads[i] += w.Load()
	}
}

// queued returns the pending counts whose prompts the cost and wait
// modes add to their queues (costLoads), or nil while none is pending.
func (s *snapshot) queued() *pendingCounts {
	if s.x.pending.all.Load() == 0 {
		return nil
	}
	return s.x.pending
}

// pendingPick counts a decision in its worker's pending count, and its
// prompt tokens to compute in its pending prefill, until the caller says
// the worker's load and PendingPrefill count them, or never will
// (Decision.Acquired, promised by Request.Acquires); only the first call
// counts.
//
// The caller raises the worker's load after Select returns and its
// circuit breaker lets it, and a selection whose snapshot was read in
// between saw that decision neither in the loads nor among the picks
// logged since: on a starved machine the window is long, and a burst
// herded through it as it did through a stale snapshot (see refresh).
// Snapshots add the pending count to the load. A snapshot reads the log's
// number, then per worker its pending count, then its load, so no
// decision counts zero times; one counts twice when acquired between
// those two reads, or when decided after the log's number was read but
// before its worker's pending count (it is then among the picks logged
// since as well). Twice only makes a worker look one request busier to
// that one selection, which spreads a burst the more. Like the log, the
// counts belong to the candidate list's index: a selection over another
// list does not see them.
//
// The cost and wait modes keep no log, and price a worker by its queue
// (PendingPrefill) and, in the wait mode, by its load against its
// running-request limit: without the counts two selections in the window
// saw the same free slot and the same short queue. Their snapshots add
// the pending decisions to the loads and their prompt tokens to the
// queues; a decision made after a snapshot's read is one it does not see
// (as without the counts: no log tells it).
type pendingPick struct {
	x      *workerIndex
	i      int // the worker's position in x, and its pending count's
	tokens int // the prompt tokens to compute, as the caller's Prefilling
	done   atomic.Bool
}

// pendingCounts are the decisions pending per worker and in all, and
// their prompt tokens to compute per worker (read only by the cost and
// wait modes, in costLoads).
type pendingCounts struct {
	per     []atomic.Int32
	prefill []atomic.Int64
	all     atomic.Int64
}

func newPendingCounts(n int) *pendingCounts {
	return &pendingCounts{per: make([]atomic.Int32, n), prefill: make([]atomic.Int64, n)}
}

// pend counts a decision of worker i, with tokens of prompt to compute, as
// pending in x. The caller holds the tree's write lock and has not logged
// the decision yet: a snapshot that reads x's total before its loads then
// sees it either pending, or in the log past its number.
func (p *pendingPick) pend(x *workerIndex, i, tokens int) {
	p.x, p.i, p.tokens = x, i, tokens
	x.pending.prefill[i].Add(int64(tokens))
	x.pending.per[i].Add(1)
	x.pending.all.Add(1)
}

func (p *pendingPick) acquired() {
	if p.x != nil && p.done.CompareAndSwap(false, true) {
		p.x.pending.per[p.i].Add(-1)
		p.x.pending.prefill[p.i].Add(-int64(p.tokens))
		p.x.pending.all.Add(-1)
	}
}

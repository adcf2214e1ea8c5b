package policy

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/kvgate/kvgate/workers"
)

// An engine whose KV cache is full queues what it is sent, and while a
// request waits there the requests admitted before it evict, least
// recently used first, every page of the cache no running request holds:
// the finished turns and idle prefixes that the router's tree, fed by the
// engine's own events, still shows at the decision. Most misses under
// eviction pressure were these (multi-turn, 128 conversations on
// 40,000-token caches: the engine then reported cached only the system
// prompt, which its running requests held). So on an engine whose last
// load poll reported requests waiting in its own queue for KV room
// (engineQueueing), cache_aware predicts cached only the part of the
// match that a request of its own running there when the engine admits
// this one shares: the pages an engine keeps are those its running
// requests hold (see predict for which requests those are).
//
// An engine at its running limit queues for a running place, not for KV:
// the requests ahead of ours fill its free KV and then evict, least
// recently used first, as much as they add beyond it. Whether that reaches
// the match depends on when the engine last used the match's pages. So
// the policies remember, per worker, what the requests that ended there
// lately had cached (their prompts and replies, recentEnds of them) and the
// KV their requests added there since each ended (prefill charged, replies
// of those that ended); the match is predicted lost (only what a request
// in flight shares is kept) when the KV added since the last request that
// held the match ended, plus the prefill of the requests queued ahead,
// reaches the KV the engine's running requests leave free (see
// atLimitEvicts). Under overload on the Mooncake traces (8 engines of 8
// slots) this rule removed up to half of the misses; most of what
// it leaves are prefixes the engine lost only in part, whose extent no
// such rule tells (BENCHMARKS.md, "A full engine's eviction predicted from
// the match's last use").
//
// The engine is chosen before, from the match, as without the rule, and
// the prefill the worker is charged for the request (Decision.PrefillTokens)
// is still the prompt less that match: the routing is unchanged, and only
// the prediction says what the engine will hold.

// inFlightMaxAge bounds how long a placed request's prompt is counted when
// its outcome never comes and it was not abandoned (Decision.Abandoned): such
// entries are swept when a worker's map reaches its sweep size, which is
// then set to twice what remains (at least inFlightSweepMin).
const inFlightMaxAge = 10 * time.Minute

// inFlight is, per worker, the prompts of the requests a policy placed
// there whose outcome it has not observed yet, each named by a K the
// decision carries back to Observe (cache_aware's snapshot, which its
// selection allocates anyway; vllm_cache_aware's vcaFlight).
type inFlight[K comparable] struct {
	mu  sync.Mutex
	per map[string]*flights[K]
}

type flights[K comparable] struct {
	reqs    map[K]flight
	sweepAt int // sweep entries past inFlightMaxAge when reqs reaches it
	// charged is the KV the router's requests added on the worker so
	// far: the prefill (prompt less prediction) of every request placed
	// there, and the output of every one that ended. ends are the latest
	// requests that ended there, oldest first, at most recentEnds and
	// recentEndTokens.
	charged int64
	ends    []ended
	endToks int
}

type flight struct {
	prompt []uint32
	at     time.Time
	charge int // the prefill the worker was charged: prompt less prediction
}

// ended is a request that ended on the worker, what the engine cached of it
// (its prompt, then its reply), and the KV charged to the worker up to its
// end (flights.charged then).
type ended struct {
	prompt, reply []uint32
	charged       int64
}

// holds reports whether the engine cached ids[from:to] where e had them: e's
// prompt followed by its reply holds those tokens at those positions.
func (e ended) holds(ids []uint32, from, to int) bool {
	p, r := e.prompt, e.reply
	if to > len(p)+len(r) {
		return false
	}
	if from < len(p) {
		if !slices.Equal(p[from:min(to, len(p))], ids[from:min(to, len(p))]) {
			return false
		}
		from = len(p)
	}
	return from >= to || slices.Equal(r[from-len(p):to-len(p)], ids[from:to])
}

// recentEnds and recentEndTokens bound the ended requests kept per worker.
// Under overload on the conversation trace (8 engines of 8 slots) the
// matches an engine at its limit lost had last been used a median of 10 to
// 11 s before (the 90th percentile 13 to 15 s), with a median of 13 to 17
// and at most 35 requests ended on that engine since; 64 covers that with
// room, and the token bound keeps long prompts from holding more than 4 MB
// per worker.
const (
	recentEnds      = 64
	recentEndTokens = 1 << 20
)

// inFlightSweepMin is the smallest map a sweep looks at.
const inFlightSweepMin = 1024

func newInFlight[K comparable]() *inFlight[K] { return &inFlight[K]{per: map[string]*flights[K]{}} }

// add counts prompt as in flight on url until done(url, s); charge is the
// prefill the worker is charged for it (the prompt less the prediction).
func (f *inFlight[K]) add(url string, s K, prompt []uint32, charge int, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.per[url]
	if fl == nil {
		fl = &flights[K]{reqs: map[K]flight{}, sweepAt: inFlightSweepMin}
		f.per[url] = fl
	}
	if len(fl.reqs) >= fl.sweepAt {
		for k, v := range fl.reqs {
			if now.Sub(v.at) > inFlightMaxAge {
				delete(fl.reqs, k)
			}
		}
		fl.sweepAt = max(inFlightSweepMin, 2*len(fl.reqs))
	}
	fl.reqs[s] = flight{prompt: prompt, at: now, charge: charge}
	fl.charged += int64(charge)
}

// done ends s's count on url. used says its request ran there (it did not
// fail before the engine had it), so the engine last used its prompt's
// pages then, and cached reply (the output but its last token) after them.
func (f *inFlight[K]) done(url string, s K, used bool, reply []uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.per[url]
	if fl == nil {
		return
	}
	r, ok := fl.reqs[s]
	if !ok {
		return
	}
	delete(fl.reqs, s)
	if !used {
		return
	}
	fl.charged += int64(len(reply))
	fl.ends = append(fl.ends, ended{prompt: r.prompt, reply: reply, charged: fl.charged})
	fl.endToks += len(r.prompt) + len(reply)
	drop := 0
	for len(fl.ends)-drop > recentEnds || (fl.endToks > recentEndTokens && len(fl.ends)-drop > 1) {
		fl.endToks -= len(fl.ends[drop].prompt) + len(fl.ends[drop].reply)
		drop++
	}
	if drop > 0 {
		n := copy(fl.ends, fl.ends[drop:])
		clear(fl.ends[n:])
		fl.ends = fl.ends[:n]
	}
}

// abandon ends s's count on url without an end: its request never reached
// the engine.
func (f *inFlight[K]) abandon(url string, s K) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl := f.per[url]; fl != nil {
		if r, ok := fl.reqs[s]; ok {
			fl.charged -= int64(r.charge)
			delete(fl.reqs, s)
		}
	}
}

// forget drops url's requests (the worker left the fleet).
func (f *inFlight[K]) forget(url string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.per, url)
}

// place sets d's prediction for req on v, from the match d carries: what
// of it the engine reuses (reusedBy) and, where events keep the policy's
// tree exact (exact), what of that the engine's queue leaves (predict). It
// then counts the prompt in flight on v under key until the outcome, unless
// req is a dry run, and reports whether it did. Without events the outcome
// corrects the tree from the prediction, so nothing is counted.
func (f *inFlight[K]) place(d *Decision, v workers.View, req *Request, pageSize int, exact bool, key K) bool {
	d.PredictedCachedTokens, d.cut = reusedBy(req, d.PredictedCachedTokens, pageSize)
	if !exact {
		return false
	}
	d.engine = v.EngineLoad()
	predicted := f.predict(v, d.engine, req.InputIDs, pageSize, d.PredictedCachedTokens)
	d.PredictedCachedTokens, d.cut = predicted, d.cut+d.PredictedCachedTokens-predicted
	if req.DryRun {
		return false
	}
	f.add(v.URL(), key, req.InputIDs, len(req.InputIDs)-predicted, time.Now())
	return true
}

// holders says which of a worker's requests in flight hold their pages
// when its engine admits the next request: the newest of them (the last
// placed), and, when since is set, any placed at or after it.
type holders struct {
	newest int
	since  time.Time
}

// youngHold is the share of an engine's mean request duration
// (workers.View.MeanRequestSeconds, from placement to end, its time in
// the engine's queue included) within which a request placed there still
// runs when an engine queueing for KV admits the next one: it has most of
// its run ahead of it. Counting only the newest running ones left, on
// engines of 256 slots, misses where an older request still ran and held
// the match; how long ago it was placed told those apart (the ones still
// held a median of 0.5 of the mean duration before, the evicted ones
// 0.85 to 0.9). Replayed on the same decisions, 0.6 was the best share on
// the two Mooncake traces at --speed 6 and shared prefixes at 40 QPS, and
// on trace parts and speeds it was not chosen on it removed 1 to 29 of 13
// to 119 misses (bench/results/young-2026-12-01).
const youngHold = 0.6

// shared is the longest prefix of prompt, in whole pages and at most limit
// tokens, that one of the requests in flight on url that h counts shares.
// A candidate can only beat the best so far by matching the page after
// it, so that page is compared first and most candidates are passed over
// in one page.
func (f *inFlight[K]) shared(url string, prompt []uint32, pageSize, limit int, h holders) int {
	limit = min(limit, len(prompt)) / pageSize * pageSize
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.per[url]
	if fl == nil {
		return 0
	}
	var from time.Time // requests placed before it do not count
	switch {
	case h.newest >= len(fl.reqs):
		// every one counts
	case h.newest > 0:
		from = fl.newestFirst()[h.newest-1].at
		if !h.since.IsZero() && h.since.Before(from) {
			from = h.since
		}
	case !h.since.IsZero():
		from = h.since
	default:
		return 0
	}
	best := 0
	for _, r := range fl.reqs {
		if best >= limit {
			break
		}
		if r.at.Before(from) {
			continue
		}
		p := r.prompt
		if len(p) < best+pageSize ||
			!slices.Equal(p[best:best+pageSize], prompt[best:best+pageSize]) ||
			!slices.Equal(p[:best], prompt[:best]) {
			continue
		}
		n := best + pageSize
		for n+pageSize <= min(len(p), limit) && slices.Equal(p[n:n+pageSize], prompt[n:n+pageSize]) {
			n += pageSize
		}
		best = n
	}
	return best
}

// newestFirst is the worker's requests in flight, the last placed first:
// an engine that serves in arrival order admits them in the reverse order.
func (fl *flights[K]) newestFirst() []flight {
	rs := make([]flight, 0, len(fl.reqs))
	for _, r := range fl.reqs {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b flight) int { return b.at.Compare(a.at) })
	return rs
}

// engineQueueing reports whether a request sent now to an engine whose last
// load poll was l waits in its queue for KV room, while the requests ahead
// of it push out every page no running request holds: the poll said that
// requests wait there, and the engine runs fewer than its running limit
// (or reports no limit or no KV size, taken the same way). atLimit reports
// an engine that queues at its limit instead, for a running place (see
// atLimitEvicts).
func engineQueueing(l workers.Load) (queueing, atLimit bool) {
	switch {
	case l.Waiting == 0:
		return false, false
	case l.MaxRunning == 0 || l.MaxTotalTokens == 0 || l.Running < l.MaxRunning:
		return true, false
	}
	return false, true
}

// atLimitEvicts reports whether an engine at its running limit, with
// requests waiting in its queue, evicts the first matched tokens of prompt
// before a request for it, sent now, is admitted. It fills the KV its
// running requests leave free (MaxTotalTokens less UsedTokens) first, then
// evicts least recently used first: the match goes when the KV added since
// the engine last used it, and by the requests queued ahead (the Waiting
// newest of ours in flight there), reaches that free KV. The KV added
// since is the prefill this router charged the worker after the
// latest request that held the match ended there, and the replies of
// those that ended since (their decode took KV too); the prefill charged
// to those still queued is in both terms, which a fit over overloaded runs
// did not find worth correcting (bench/results/atlimit-2026-12-01/fit.py).
//
// When no request that held the match ended there lately, when it last
// used the match is not known, and the rule is the coarse one: the queue
// ahead, each request counted at this prompt's length, needs at least the
// free KV. An engine of 8 slots with a 400,000-token cache queues for a
// running place long before its KV fills; calling every such queue a loss
// under-predicted (at --speed 6 95 of 100 misses were pages it kept).
func (fl *flights[K]) atLimitEvicts(l workers.Load, prompt []uint32, pageSize, matched int) bool {
	free := int64(l.MaxTotalTokens - l.UsedTokens)
	since, known := fl.chargedSinceEnd(prompt, pageSize, matched)
	if !known {
		return int64(l.Waiting)*int64(len(prompt)) >= free
	}
	return since+fl.aheadCharge(l.Waiting) >= free
}

// chargedSinceEnd is the KV charged to the worker since the latest ended
// request that held the first matched tokens of prompt.
func (fl *flights[K]) chargedSinceEnd(prompt []uint32, pageSize, matched int) (int64, bool) {
	last := max(0, matched-pageSize) // compared first: the page a match ends on tells most apart
	for i := len(fl.ends) - 1; i >= 0; i-- {
		if e := fl.ends[i]; e.holds(prompt, last, matched) && e.holds(prompt, 0, last) {
			return fl.charged - e.charged, true
		}
	}
	return 0, false
}

// aheadCharge is the prefill charged for the n requests placed last on the
// worker that are still in flight: those an engine serving in arrival
// order has not admitted when n wait in its queue.
func (fl *flights[K]) aheadCharge(n int) int64 {
	if n <= 0 || len(fl.reqs) == 0 {
		return 0
	}
	rs := fl.newestFirst()
	var sum int64
	for _, r := range rs[:min(n, len(rs))] {
		sum += int64(r.charge)
	}
	return sum
}

// predict returns the tokens of matched (the chosen worker's match) that a
// request for prompt should find cached on v: all of them, unless v's
// engine is queueing for KV (engineQueueing) or, at its running limit,
// evicts the match first (atLimitEvicts), and then only those a request in
// flight there shares (shared), in whole pages of pageSize tokens.
//
// Which requests in flight count differs between the two queues. One for KV
// room evicts every page no running request pins as it admits, so what
// counts is the requests the engine runs when it admits this one: it admits
// in arrival order and runs about as many at a time as its last poll said
// (l.Running), so those are the newest that many of ours in flight there,
// and with them any placed there lately (youngHold); the older ones will
// have ended, and their pages gone to the queue's admissions. On engines of
// 256 slots with full KV (the conversation trace at --speed 6), with every
// request in flight counted, 59 of the 61 predictions above the engine's
// report were matches one of them shared whole, evicted by the admission all
// the same; counting the newest running ones cut the misses on both Mooncake
// traces by a quarter to three quarters (BENCHMARKS.md, "The requests that
// hold a queueing engine's pages"). At the running limit the engine queues
// for a place with KV to spare: a request in flight that ends first leaves
// its pages cached and lately used, so every one counts (counting only the
// newest there did no better on engines of 8 slots, and worse on two
// workloads).
func (f *inFlight[K]) predict(v workers.View, l workers.Load, prompt []uint32, pageSize, matched int) int {
	if matched == 0 {
		return 0
	}
	queueing, atLimit := engineQueueing(l)
	if !queueing && !atLimit {
		return matched
	}
	url := v.URL()
	if queueing {
		h := holders{newest: l.Running}
		if mean := v.MeanRequestSeconds(); mean > 0 {
			h.since = time.Now().Add(-time.Duration(youngHold * mean * float64(time.Second)))
		}
		return f.shared(url, prompt, pageSize, matched, h)
	}
	if !f.evictsAtLimit(url, l, prompt, pageSize, matched) {
		return matched
	}
	return f.shared(url, prompt, pageSize, matched, holders{newest: math.MaxInt})
}

// evictsAtLimit is atLimitEvicts for url's requests.
func (f *inFlight[K]) evictsAtLimit(url string, l workers.Load, prompt []uint32, pageSize, matched int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.per[url]
	if fl == nil {
		fl = &flights[K]{} // nothing placed there: nothing known
	}
	return fl.atLimitEvicts(l, prompt, pageSize, matched)
}

// cachedReply is what an engine caches of a request's output after its
// prompt: all of it but the last token, which no step has read yet.
func cachedReply(out []uint32) []uint32 {
	if len(out) < 2 {
		return nil
	}
	return out[:len(out)-1]
}

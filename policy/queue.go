package policy

import (
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
// match that a request of its own in flight there shares: the pages an
// engine keeps are those its running requests hold. A request in flight
// may itself still wait in the queue and hold nothing; on the
// shared-prefix workload, where requests of one group queue together, the
// misses this leaves remain.
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
}

type flight struct {
	prompt []uint32
	at     time.Time
}

// inFlightSweepMin is the smallest map a sweep looks at.
const inFlightSweepMin = 1024

func newInFlight[K comparable]() *inFlight[K] { return &inFlight[K]{per: map[string]*flights[K]{}} }

// add counts prompt as in flight on url until done(url, s).
func (f *inFlight[K]) add(url string, s K, prompt []uint32, now time.Time) {
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
	fl.reqs[s] = flight{prompt: prompt, at: now}
}

// done ends s's count on url.
func (f *inFlight[K]) done(url string, s K) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl := f.per[url]; fl != nil {
		delete(fl.reqs, s)
	}
}

// forget drops url's requests (the worker left the fleet).
func (f *inFlight[K]) forget(url string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.per, url)
}

// shared is the longest prefix of prompt, in whole pages and at most limit
// tokens, that a request in flight on url shares. A candidate can only
// beat the best so far by matching the page after it, so that page is
// compared first and most candidates are passed over in one page.
func (f *inFlight[K]) shared(url string, prompt []uint32, pageSize, limit int) int {
	limit = min(limit, len(prompt)) / pageSize * pageSize
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.per[url]
	if fl == nil {
		return 0
	}
	best := 0
	for _, r := range fl.reqs {
		if best >= limit {
			break
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

// engineQueueing reports whether a request for a prompt of promptLen
// tokens sent to v now waits in its engine's queue while the requests
// ahead of it push out every page no running request holds. The engine
// said at its last load poll that requests wait there, and either:
//   - it runs fewer than its running limit, so the queue waits for KV
//     room (or it reports no limit or no KV size, taken the same way); or
//   - it is at its limit, and the requests ahead, each counted at
//     promptLen, need at least the KV its running requests leave free
//     (MaxTotalTokens less UsedTokens).
//
// An engine that queues only for a running place while its KV has room
// (engines of 8 slots and 400,000-token caches on the conversation trace)
// fills that room first and keeps what it holds. Calling it queueing
// there under-predicted: the wait mode binds requests to such engines on
// purpose, and at --speed 6 95 of its 100 misses were pages the engine
// kept.
func engineQueueing(v workers.View, promptLen int) bool {
	l := v.EngineLoad()
	switch {
	case l.Waiting == 0:
		return false
	case l.MaxRunning == 0 || l.MaxTotalTokens == 0 || l.Running < l.MaxRunning:
		return true
	}
	return l.Waiting*promptLen >= l.MaxTotalTokens-l.UsedTokens
}

// predict returns the tokens of matched (the chosen worker's match) that a
// request for prompt should find cached on v: all of them, unless v's
// engine is queueing (engineQueueing), and then only those a request in
// flight there shares, in whole pages of pageSize tokens.
func (f *inFlight[K]) predict(v workers.View, prompt []uint32, pageSize, matched int) int {
	if matched == 0 || !engineQueueing(v, len(prompt)) {
		return matched
	}
	return f.shared(v.URL(), prompt, pageSize, matched)
}

package waitq

import (
	"slices"

	"github.com/kvgate/kvgate/workers"
)

// Saturation says when an engine counts as full, so that late binding
// keeps a request in the router instead of sending it there. The zero
// value judges an engine by the running-request limit it reports only.
type Saturation struct {
	// EngineQueue also counts as full an engine whose last load poll
	// reported requests waiting in its own queue, until as many of this
	// router's requests on it have ended since (View.EngineQueued). An
	// engine whose running limit is high but whose KV cache is full admits
	// nothing more and queues what it is sent; there the requests admitted
	// before a queued one evict the prefix it was routed for. Held in the
	// router instead, a request is bound when some engine has room, to the
	// engine that holds its prefix then. Off by default: under KV
	// pressure it raised prediction exactness (multi-turn, 128 users:
	// 0.76-0.77 to 0.85; shared prefix at 40 QPS: 0.95 to 0.96-0.97) at
	// equal TTFT, but on the overloaded conversation trace its TTFT p99
	// was 28% worse in the one run (bench/results/saturation-2026-11-28).
	EngineQueue bool
}

// Full reports whether an engine has no room for another request: the
// requests on it (View.Load: this router's in flight, plus those the engine
// last reported running or waiting that were not this router's) have
// reached the running-request limit it reports, or, with EngineQueue, its
// own queue still holds requests. An engine with a queue of its own counts
// as full by the limit too when running at it: the waiting requests put its
// load above the limit until enough of ours end to drain that queue. An
// engine that reports no limit (and, with EngineQueue, no queue) is never
// full, so late binding changes nothing for a fleet that reports neither.
//
// Prompt tokens awaiting prefill (View.PendingPrefill) are not counted: the
// limit is a number of requests, and a long prefill already holds one of
// them.
func (s Saturation) Full(v workers.View) bool {
	if s.EngineQueue && v.EngineQueued() > 0 {
		return true
	}
	limit := v.MaxRunningRequests()
	return limit > 0 && v.Load() >= limit
}

// Room reports whether one more request may be bound to candidates now,
// beyond pending ones bound already and not yet placed (their engines'
// loads do not show them yet): the candidates available and outside
// excluded have more free places, limit minus load, than pending, or one of
// them reports no limit; an engine Full by its own queue has none, and one
// behind a half-open circuit breaker no more than its free probe places. When
// none is available at all it reports true: waiting would not help, and
// the placement that follows says why nothing can serve.
func (s Saturation) Room(candidates []workers.View, excluded []string, pending int) bool {
	available, free := false, 0
	for _, v := range candidates {
		if !usable(v, excluded) {
			continue
		}
		available = true
		if s.EngineQueue && v.EngineQueued() > 0 {
			continue // no free place until its own queue drains
		}
		// A half-open breaker lets its probes through, whatever the
		// engine's own limit.
		probes, limit := v.Worker().Breaker().Places(), v.MaxRunningRequests()
		switch {
		case limit <= 0 && probes < 0:
			return true
		case limit <= 0:
			free += probes
		case probes < 0:
			free += max(0, limit-v.Load())
		default:
			free += min(probes, max(0, limit-v.Load()))
		}
		if free > pending {
			return true
		}
	}
	return !available
}

// FullOf appends to dst the available candidates outside excluded that are
// Full: the ones a request bound now should not be sent to.
func (s Saturation) FullOf(dst []string, candidates []workers.View, excluded []string) []string {
	for _, v := range candidates {
		if usable(v, excluded) && s.Full(v) {
			dst = append(dst, v.URL())
		}
	}
	return dst
}

// Avoid appends to dst the candidates a request bound now should not be
// placed on: the Full ones, unless they are every available candidate
// outside excluded. The request was bound because a place looked free, so a
// poll taken since then (another client's requests, perhaps ended by now) is
// what fills some of them. Then only those this router's own requests fill
// are avoided (in flight on them as many as their limit; that count is
// never stale), and none when that too is all of them: the policy chooses
// among them rather than fail a request that may run.
func (s Saturation) Avoid(dst []string, candidates []workers.View, excluded []string) []string {
	n := len(dst)
	dst = s.FullOf(dst, candidates, excluded)
	available := 0
	for _, v := range candidates {
		if usable(v, excluded) {
			available++
		}
	}
	if len(dst)-n < available {
		return dst
	}
	dst = dst[:n]
	for _, v := range candidates {
		if limit := v.MaxRunningRequests(); limit > 0 && v.Worker().InFlight() >= limit && usable(v, excluded) {
			dst = append(dst, v.URL())
		}
	}
	if len(dst)-n == available {
		dst = dst[:n]
	}
	return dst
}

// usable reports whether v may be given a request: available and not
// excluded (an engine an earlier attempt failed on).
func usable(v workers.View, excluded []string) bool {
	return v.Available() && !slices.Contains(excluded, v.URL())
}

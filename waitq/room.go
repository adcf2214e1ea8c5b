package waitq

import (
	"slices"

	"github.com/kvgate/kvgate/workers"
)

// Full reports whether an engine has no room for another request: the
// requests on it (View.Load: this router's in flight, plus those the engine
// last reported running or waiting that were not this router's) have
// reached the running-request limit it reports. An engine with a queue of
// its own counts as full this way: running at its limit with requests
// waiting puts its load above the limit until enough of ours end to drain
// that queue. An engine that reports no limit is never full, so late
// binding changes nothing for a fleet that reports none.
//
// Prompt tokens awaiting prefill (View.PendingPrefill) are not counted: the
// limit is a number of requests, and a long prefill already holds one of
// them.
func Full(v workers.View) bool {
	limit := v.MaxRunningRequests()
	return limit > 0 && v.Load() >= limit
}

// Room reports whether one more request may be bound to candidates now,
// beyond pending ones bound already and not yet placed (their engines'
// loads do not show them yet): the candidates available and outside
// excluded have more free places, limit minus load, than pending, or one of
// them reports no limit. When none is available at all it reports true:
// waiting would not help, and the placement that follows says why nothing
// can serve.
func Room(candidates []workers.View, excluded []string, pending int) bool {
	available, free := false, 0
	for _, v := range candidates {
		if !v.Available() || slices.Contains(excluded, v.URL()) {
			continue
		}
		available = true
		limit := v.MaxRunningRequests()
		if limit <= 0 {
			return true
		}
		free += max(0, limit-v.Load())
		if free > pending {
			return true
		}
	}
	return !available
}

// FullOf appends to dst the available candidates outside excluded that are
// Full: the ones a request bound now should not be sent to.
func FullOf(dst []string, candidates []workers.View, excluded []string) []string {
	for _, v := range candidates {
		if v.Available() && Full(v) && !slices.Contains(excluded, v.URL()) {
			dst = append(dst, v.URL())
		}
	}
	return dst
}

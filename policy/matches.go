package policy

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/kvgate/kvgate/tree"
	"github.com/kvgate/kvgate/workers"
)

// Matches is how many prompt tokens each candidate holds according to a
// cache-aware policy's index (Decision.Matched, Decision.Confirmed), read by
// worker URL with Of.
//
// It is not a map because a selection over 4,000 workers filled a
// 4,000-entry map on every request (a chat template's header is held by
// every worker that served anything), for a figure only Explain reads: that
// map was a third of cache_aware's selection cost. A Matches shares the
// policy's URL → position index, built once per candidate set, and keeps the
// selection's per-position counts, so recording it costs nothing per
// worker.
type Matches struct {
	index  map[string]int // URL → position in tokens; shared, never modified
	tokens []int          // by position; nil when every position holds 0
	other  map[string]int // candidates outside index (unavailable ones)
}

// Of returns the tokens url holds: 0 for a worker holding none, for a worker
// that was not a candidate, and on a nil Matches.
func (m *Matches) Of(url string) int {
	if m == nil {
		return 0
	}
	if i, ok := m.index[url]; ok {
		if m.tokens == nil {
			return 0
		}
		return m.tokens[i]
	}
	return m.other[url]
}

// Len returns how many workers m covers (holding tokens or not).
func (m *Matches) Len() int {
	if m == nil {
		return 0
	}
	return len(m.index) + len(m.other)
}

// Map returns m as a map from URL to tokens, a worker for each entry: for
// logs and tests, not the routing path.
func (m *Matches) Map() map[string]int {
	if m == nil {
		return nil
	}
	out := make(map[string]int, m.Len())
	for url := range m.index {
		out[url] = m.Of(url)
	}
	for url, n := range m.other {
		out[url] = n
	}
	return out
}

func (m *Matches) String() string { return fmt.Sprint(m.Map()) }

// workerIndex maps the URLs of a list of workers to their positions in it.
// It is immutable once built, but for the pick log and pending counts it
// points to, which cache_aware's selections update.
type workerIndex struct {
	ws     []workers.View // the list it was built or last confirmed for
	urls   []string
	pos    map[string]int
	roster *tree.Roster // urls as cache_aware's tree tenants
	log    *pickLog     // cache_aware's latest decisions (see pickLog)
	// pending counts cache_aware's decisions that their workers' loads
	// do not count yet (see pendingPick).
	pending *pendingCounts
}

// indexCache keeps the workerIndex of the last candidate list. Building one
// is a map of the fleet's size, and the available candidates rarely change
// between requests, so the last one is reused while its URLs are the
// candidates', in order. The same workers as last time (by identity, in
// order), the common case, are recognised by comparing the pointers in the
// two lists, without reading the workers themselves: at 4,000 workers
// reading each one's URL was a tenth of a selection.
type indexCache struct{ last atomic.Pointer[workerIndex] }

// of returns ws's index, calling added for each worker of a newly built one
// (cache_aware sets the worker's tree limit there: a new candidate list is
// where a new worker first shows up).
func (c *indexCache) of(ws []workers.View, added func(workers.View)) *workerIndex {
	x := c.last.Load()
	if x != nil && slices.Equal(x.ws, ws) {
		return x
	}
	if x != nil && len(x.urls) == len(ws) {
		same := true
		for i, w := range ws {
			if x.urls[i] != w.URL() {
				same = false
				break
			}
		}
		if same { // other Worker values with the same URLs (a replaced worker)
			y := *x
			y.ws = slices.Clone(ws)
			c.last.Store(&y)
			return &y
		}
	}
	x = &workerIndex{ws: slices.Clone(ws), urls: make([]string, len(ws)), pos: make(map[string]int, len(ws)), log: new(pickLog), pending: newPendingCounts(len(ws))}
	for i, w := range ws {
		x.urls[i] = w.URL()
		x.pos[x.urls[i]] = i
		if added != nil {
			added(w)
		}
	}
	x.roster = tree.NewRoster(x.urls)
	c.last.Store(x)
	return x
}

// outside returns the candidates not in x (the unavailable ones; rarely
// more than a few), or nil.
func (x *workerIndex) outside(candidates []workers.View) []string {
	if len(x.urls) == len(candidates) {
		return nil
	}
	var rest []string
	for _, w := range candidates {
		if _, ok := x.pos[w.URL()]; !ok {
			rest = append(rest, w.URL())
		}
	}
	return rest
}

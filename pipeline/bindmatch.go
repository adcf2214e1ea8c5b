package pipeline

import (
	"slices"

	"github.com/kvgate/kvgate/tree"
	"github.com/kvgate/kvgate/waitq"
	"github.com/kvgate/kvgate/workers"
)

// Late binding's matching: which waiting request an engine's free place
// goes to.
//
// Without it the head of the queue is bound and the policy chooses among
// all engines. Under full overload a cache-affine policy (the wait mode)
// then sends most requests to the engine holding their prefix although it
// is full: the request queues blind inside that engine, the free place it
// did not take stays free, so the next head is bound, and so on (on the
// conversation trace at --speed 6, 1,450-1,530 of 2,000 requests reached an
// engine at its limit). Placing the head only on engines with room instead
// (--late-binding-avoid-full) threw the affinity away (hit rate 0.053
// against 0.140).
//
// Matching does both: a free place is never left idle while requests
// wait, and it goes to the request that loses least by running there now.
// Among the first MatchWindow waiting of the head's priority class (the
// window; see waitq.Config.Pick), each request's loss is the cached prefix
// it holds on some engine beyond what it holds on an engine with room (the
// policy's read-only Lookup): 0 for a request cached where there is room
// and for one cached nowhere. The least loss wins; between equal losses,
// the longer match on an engine with room, then queue order. It is bound
// and placed only on engines with room; requests whose cache is on a full
// engine stay in the router for it, behind no engine's queue. No request
// is passed over more than MaxPasses times (the window ends with the first
// one that was), so the head's extra wait is at most MaxPasses bindings.
// Requests bound at arrival (nobody waiting for their model) are placed as
// without matching: the policy chooses among all engines.

// prefixLookup is the read-only prefix match of a cache-aware policy
// (policy.CacheAware.Lookup).
type prefixLookup interface {
	Lookup(dst []tree.TenantMatch, ids []uint32) tree.Match
}

// pick is the queue's Config.Pick: the index in window of the request to
// bind now (see above). Each window entry's Ref is its *Job.
func (g *gate) pick(_ string, window []waitq.Ticket) int {
	if len(window) < 2 {
		return 0
	}
	head := window[0].Ref.(*Job)
	look, ok := head.Route.Main().(prefixLookup)
	if !ok {
		return 0 // nothing to match by: queue order
	}
	cs := head.Route.Candidates(g.reg, workers.RoleRegular)
	if len(cs) == 0 {
		return 0 // disaggregated: queue order
	}
	// Which engines are available, and which of them have room.
	free := make(map[string]bool, len(cs))
	anyFull, anyFree := false, false
	for _, w := range cs {
		v := workers.ViewOf(w)
		if !v.Available() {
			continue
		}
		full := g.cfg.Saturation.Full(v)
		free[w.URL()] = !full
		anyFull, anyFree = anyFull || full, anyFree || !full
	}
	if !anyFull || !anyFree {
		return 0 // every engine has room, or none: nothing to match
	}
	best, bestLoss, bestHere := 0, 0, 0
	var m tree.Match // its Tenants reused from one request to the next
	for i, t := range window {
		j := t.Ref.(*Job)
		anywhere, here := 0, 0
		m = look.Lookup(m.Tenants, j.InputIDs)
		ex := j.excluded()
		for _, tm := range m.Tenants {
			room, ok := free[tm.Tenant]
			if !ok || slices.Contains(ex, tm.Tenant) {
				continue
			}
			anywhere = max(anywhere, tm.Tokens)
			if room {
				here = max(here, tm.Tokens)
			}
		}
		loss := anywhere - here
		if i == 0 || loss < bestLoss || loss == bestLoss && here > bestHere {
			best, bestLoss, bestHere = i, loss, here
		}
	}
	return best
}

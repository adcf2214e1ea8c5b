package policy

import (
	"fmt"
	"strings"

	"github.com/kvgate/kvgate/workers"
)

// Selection modes of cache_aware and vllm_cache_aware (--cache-aware-mode).
const (
	// ModeThreshold is SMG's documented rule: the longest match when it covers enough
	// of the prompt (a threshold) and the fleet is not imbalanced (a load
	// rule), else the least loaded worker.
	ModeThreshold = "threshold"
	// ModeCost sends a request where it costs least (see costModel): the
	// prefill its prompt still needs there, the prefill queued ahead of it
	// and the KV its decoding requests hold, all in prompt tokens.
	ModeCost = "cost"
)

// costModel is the cost-aware mode's rule, in the spirit of Dynamo's KV
// router: a request goes to the worker where
//
//	cost = prefill + EvictWeight × evict + queue + DecodeWeight × held + wait
//
// is smallest, every term in prompt tokens:
//
//   - prefill: the prompt's tokens the worker must compute, the prompt less
//     the part of the match its cache can still hold (keep, below);
//   - evict: the pages those tokens will push out of a full cache, which
//     other prompts would have found there: prefill × the share of the
//     worker's KV capacity the router's tree (or block index) says its
//     cache holds. A cache with room loses nothing; a full one loses as
//     much as it writes, so a prompt written where its prefix already is
//     costs the fleet's caches less than a copy of it elsewhere.
//     EvictWeight is how many later prefills a lost page costs: more than
//     one, since a page that was worth keeping serves every prompt that
//     shares it, and the present request's queue is paid once;
//   - queue: the prompt tokens this router has sent the worker to compute
//     whose first token has not come back (workers.Worker.PendingPrefill):
//     the prefill ahead of this one;
//   - held: the KV tokens the engine's running requests hold (UsedTokens of
//     its last GetLoads), weighted as decode work: a busy batch slows
//     every step, prefill chunks included, and pins pages;
//   - wait: the prompt's tokens that do not fit beside what is held
//     (keep), which wait for running requests to end.
//
// keep = capacity − held bounds what of its cache a worker can still offer
// this request: held pages are pinned by running requests, and a match
// beyond the rest cannot be in the cache. capacity is the engine's reported
// MaxTotalTokens, else its KVCapacityTokens, else what its KV events showed
// it held as it evicted (eventMirror.learnedCapacity); when none is known,
// keep is unbounded and nothing is evicted. The queue is not taken from keep: an engine matches a prompt's
// prefix when it admits the request, and admission does not wait for the
// prefills ahead of it (the simulator's does not; a first version that
// assumed it did counted every match as lost once queues passed the cache's
// size, and on the overloaded conversation trace its hit rate fell to
// round_robin's).
//
// Ties go to the longer match, then the lower load (requests in flight),
// then the smaller tree, then the earlier candidate.
type costModel struct {
	decodeWeight, evictWeight float64
}

// costLoad is what a candidate's cost needs besides its match, read before
// the selection looks at the match.
type costLoad struct {
	queue, held, capacity int
	// cached is the tokens the policy's index holds for the worker: the
	// last tie-break (see cheaper).
	cached int
	// fullness is the share of capacity the policy's index holds for the
	// worker, in [0, 1]; 0 when the capacity is unknown.
	fullness float64
}

// costLoads reads every candidate's queue, held KV and capacity; cached(i)
// is the tokens the policy's index holds for candidate i. pending, when
// not nil, holds by candidate position the prompts of decisions whose
// callers have not counted them in PendingPrefill yet (see pendingPick),
// which queue there too.
func costLoads(ws []workers.View, cached func(i int) int, pending *pendingCounts, learned func(url string) int) []costLoad {
	out := make([]costLoad, len(ws))
	for i, w := range ws {
		out[i] = costLoadOf(w, i, cached(i), pending, learned)
	}
	return out
}

// costLoadOf is costLoads' reading of candidate w at position i, which
// holds cached tokens in the policy's index. learned, when not nil, is
// the capacity the engine's KV events showed (eventMirror.learnedCapacity),
// for an engine that reports none.
func costLoadOf(w workers.View, i, cached int, pending *pendingCounts, learned func(url string) int) costLoad {
	l := w.EngineLoad()
	capacity := l.MaxTotalTokens
	if capacity <= 0 {
		capacity = w.KVCapacityTokens()
	}
	if capacity <= 0 && learned != nil {
		capacity = learned(w.URL())
	}
	c := costLoad{queue: queueOf(w, i, pending), held: max(l.UsedTokens, 0), capacity: max(capacity, 0), cached: max(cached, 0)}
	if c.capacity > 0 {
		c.fullness = min(float64(c.cached)/float64(c.capacity), 1)
	}
	return c
}

// rereadCostQueues reads every candidate's queue again, in place, for a
// selection past the pick log (see snapshot.refresh); held KV and
// capacity stay as read. It allocates nothing: it runs under the tree's
// lock.
func rereadCostQueues(cl []costLoad, ws []workers.View, pending *pendingCounts) {
	for i, w := range ws {
		cl[i].queue = queueOf(w, i, pending)
	}
}

// queueOf is candidate w's prefill queue in tokens: its PendingPrefill,
// and the prompts of decisions pending at position i when pending is not
// nil (see costLoads).
func queueOf(w workers.View, i int, pending *pendingCounts) int {
	queue := 0
	if pending != nil {
		// Before PendingPrefill: a decision acquired between the two
		// reads counts twice, never not at all.
		queue = int(pending.prefill[i].Load())
	}
	return max(queue+w.PendingPrefill(), 0)
}

// costTerms is one candidate's cost, term by term.
type costTerms struct {
	matched, kept, prefill, evict, queue, held, wait int
	total                                            float64
}

// terms prices a prompt of inputLen tokens, matched tokens of which the
// candidate holds, on a candidate with load l.
func (m costModel) terms(inputLen, matched int, l costLoad) costTerms {
	t := costTerms{matched: matched, kept: matched, queue: l.queue, held: l.held}
	if l.capacity > 0 {
		keep := max(l.capacity-l.held, 0)
		t.kept = min(matched, keep)
		t.wait = max(inputLen-keep, 0)
	}
	t.prefill = max(inputLen-t.kept, 0)
	t.evict = int(float64(t.prefill)*l.fullness + 0.5)
	t.total = float64(t.prefill+t.queue+t.wait) + m.evictWeight*float64(t.evict) + m.decodeWeight*float64(t.held)
	return t
}

// costChoice is a cost-aware selection: every candidate's terms and the
// winner.
type costChoice struct {
	terms  []costTerms
	chosen int
}

// choose prices every candidate into c.terms (as long as matched) and picks
// the cheapest. It allocates nothing: cache_aware calls it under its tree's
// lock.
func (m costModel) choose(c *costChoice, inputLen int, matched, loads []int, cl []costLoad) {
	c.chosen = 0
	for i := range matched {
		c.terms[i] = m.terms(inputLen, matched[i], cl[i])
		t, b := c.terms[i], c.terms[c.chosen]
		if i > 0 && cheaper(t.total, t.matched, loads[i], cl[i].cached, b.total, b.matched, loads[c.chosen], cl[c.chosen].cached) {
			c.chosen = i
		}
	}
}

// cheaper reports whether a candidate priced total, holding matched tokens
// of the prompt and load requests, its tree cached tokens, beats the best
// so far (bTotal, bMatched, bLoad, bCached): the lower price, then the
// longer match, then the lower load, then the smaller tree. The cost and
// wait modes rank their candidates alike. The smaller tree breaks the tie
// of cold prompts on idle engines, as the threshold rule's miss fallback
// does: without it one request at a time went to the first candidate every
// time, and the other engines' caches stayed empty.
func cheaper(total float64, matched, load, cached int, bTotal float64, bMatched, bLoad, bCached int) bool {
	switch {
	case total != bTotal:
		return total < bTotal
	case matched != bMatched:
		return matched > bMatched
	case load != bLoad:
		return load < bLoad
	default:
		return cached < bCached
	}
}

// matchBranch names a priced decision as the threshold rule's branches do,
// so the decision metrics read alike: a hit when the chosen worker holds
// part of the prompt.
func matchBranch(matched int) string {
	if matched > 0 {
		return "cache_hit"
	}
	return "cache_miss"
}

// runnerUp is the cheapest candidate other than chosen, by total(i), or -1
// when there is none: Explain names it beside the chosen one.
func runnerUp(n, chosen int, total func(i int) float64) int {
	second := -1
	for i := range n {
		if i != chosen && (second < 0 || total(i) < total(second)) {
			second = i
		}
	}
	return second
}

// branch names a cost-aware decision (see matchBranch).
func (c costChoice) branch() string { return matchBranch(c.terms[c.chosen].matched) }

// reason says what the chosen worker's cost was made of, and the runner-up's.
func (c costChoice) reason(m costModel, ws []workers.View, inputLen int) string {
	var b strings.Builder
	t := c.terms[c.chosen]
	fmt.Fprintf(&b, "%s: %s costs %s", c.branch(), ws[c.chosen].URL(), t.format(m, inputLen))
	second := runnerUp(len(c.terms), c.chosen, func(i int) float64 { return c.terms[i].total })
	if second >= 0 {
		fmt.Fprintf(&b, "; next %s costs %.0f", ws[second].URL(), c.terms[second].total)
	}
	return b.String()
}

// format writes the terms of one candidate's cost.
func (t costTerms) format(m costModel, inputLen int) string {
	s := fmt.Sprintf("%.0f = prefill %d (%d prompt − %d cached", t.total, t.prefill, inputLen, t.kept)
	if t.kept < t.matched {
		s += fmt.Sprintf(" of %d matched", t.matched)
	}
	s += ")"
	if t.evict > 0 && m.evictWeight > 0 {
		s += fmt.Sprintf(" + %g × evict %d", m.evictWeight, t.evict)
	}
	s += fmt.Sprintf(" + queue %d + %g × held %d", t.queue, m.decodeWeight, t.held)
	if t.wait > 0 {
		s += fmt.Sprintf(" + wait %d", t.wait)
	}
	return s
}

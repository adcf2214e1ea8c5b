package policy

import (
	"strconv"
	"sync"
	"time"

	"github.com/kvgate/kvgate/workers"
)

// ModeWait sends a request where its first token is expected soonest,
// counting, once the fleet falls behind, the prefill it adds to the fleet's
// work (see waitModel).
const ModeWait = "wait"

// DefaultFleetWeight is the wait mode's charge, at full pressure, for each
// second of prefill a request adds to the fleet: that many later requests
// wait for it. See waitModel.
const DefaultFleetWeight = 4

// DefaultUnevenWeight is the wait mode's charge, at full pressure, for each
// second a candidate's start wait exceeds the fleet's soonest. See
// waitModel.
const DefaultUnevenWeight = 0

// DefaultStepWeight is the wait mode's charge, in decode steps of the
// candidate's engine at its batch with the request added, for the steps
// the request waits for before its first token (and, while above 0,
// what it slows beside it, scaled by how steeply the step grows; see
// materialStepShare): about half a step for the one running to end, then
// the step that carries its prefill. On two vLLM CPU engines, whose step
// grows steeply with the batch, it cut cache_aware's TTFT p90 by a third;
// on simulated engines whose step hardly grows it decides next to nothing
// (BENCHMARKS.md, "The decode step priced"). See waitModel.
const DefaultStepWeight = 1.5

// assumedPrefillRate is the prefill rate, in tokens per second, the wait
// mode assumes for an engine until the router has timed one of its
// prefills and no other candidate's is known: an 8B model on one H100.
// Only the ratio of a slot's wait to a prefill depends on it.
const assumedPrefillRate = 20000

// waitModel is the wait mode's rule: a request goes to the worker where
//
//	max(slot, lane) + own + step + evict + fleet + uneven
//
// is least, every term in seconds of the engine's time:
//
//   - slot: on an engine at the running-request limit it reports, the
//     time until enough of its requests end to free a slot for this one
//     (ahead of it: load − limit + 1); 0 below the limit. How soon depends
//     on how alike the engine's requests are in length (see slotWait);
//   - lane: the prefill this router has sent the engine whose first token
//     has not come back (PendingPrefill) at its prefill rate
//     (workers.Worker.PrefillTokensPerSec, learned likewise); the engine
//     prefills in admission order, so this is the prefill ahead. A request
//     waits for a slot and for the lane at once, so the larger counts;
//   - own: the prompt's tokens the engine must compute (the prompt less the
//     match), and those that do not fit beside the KV its running requests
//     hold (which wait for them to end), at that rate. The whole match
//     counts, not only what fits beside that KV as in the cost mode: the
//     pages running requests hold are often the match itself (a shared
//     prefix), which stays. Counting only what fits made every full engine
//     look cold: on 64 shared prefixes at 40 requests a second on 4 engines
//     of 30,000 tokens the mode routed nearly as round_robin (TTFT p50 6.0 s
//     and hit rate 0.27, where counting the whole match gives 92 ms and
//     0.73);
//   - step: StepWeight × the decode step with this request added to the
//     candidate's batch (workers.Worker.Step, learned from the requests
//     this router relays: their seconds per output token against the
//     requests running beside them; the candidates' mean, as for rate).
//     The prefill of a request sent to an
//     engine that is decoding waits for the running step to end and
//     then shares a step with every request it runs, so its first token
//     comes later the more requests the engine runs, below its limit as
//     well. On two vLLM CPU engines, a request whose prefix was cached
//     took 28 ms to its first token with nothing beside it and 90 ms with
//     five, and each engine's step grew with its batch alike (13 to 33
//     ms a token): no other term sees this, since below the limit slot
//     is 0, and lane counts only prefill. Engines whose step hardly grows
//     with the batch (the simulator's: a prefill lane of its own) are
//     charged about the same step everywhere, which decides nothing;
//   - slows: while the step is priced (StepWeight > 0), the time the
//     request's decode adds to the requests running beside it: each of
//     its steps (the mean tokens a request decodes after its first) is
//     longer by the step's growth per request for each of them. The step
//     term prices this request's own wait; a request added to a busy
//     engine also slows everything it runs. Without this, on engines
//     whose step grows steeply with the batch, a prefix group's requests
//     stayed on the engine that held it however busy (moving one costs a
//     cold prefill larger than the steps it saves, where the copy, once
//     made, lets every later request of the group go to either). It counts
//     in full only where one request lengthens a lone request's step by
//     materialStepShare or more, and in proportion below: where the step
//     hardly grows, a request's added decode time is spread thin over
//     many, and chasing it gave up prefixes for nothing a first token
//     waits on;
//   - evict: EvictWeight × the cached tokens those new pages push out of a
//     full cache (the cost mode's term), at that rate: later prompts that
//     would have found them there pay for them again;
//   - fleet: pressure × FleetWeight × own. Once the fleet is behind, a
//     second of prefill anywhere is a second every request behind it
//     waits, so a prompt sent away from its cache costs the fleet more than
//     its own wait. The fleet is behind when even the candidate that could
//     start the request soonest (least max(slot, lane)) makes it wait:
//     pressure is that soonest start over the time the whole prompt takes
//     to prefill, at most 1. Nothing while some engine could start the
//     request at once, in full once every engine's wait is longer than the
//     prompt's whole prefill. This keeps a conversation on its history
//     under overload, where the cost mode (which weighs the queue now
//     against the prefill saved) moved it to a shorter queue, copied the
//     history, and fed the overload. Counting an engine as busy as soon as
//     it had any prefill queued, and pressure as the square of the busy
//     share, charged almost in full at --speed 4 on the conversation trace,
//     where the fleet keeps up but every engine nearly always has a
//     prefill running: conversations stayed on engines with growing queues
//     (TTFT p50 1.9× the cost mode's).
//   - uneven: pressure × UnevenWeight × how much longer the candidate's
//     start wait (max(slot, lane)) is than the fleet's soonest. A request
//     added to a long lane delays every later request sent there, and
//     while the fleet is behind, the fleet charge alone let a prefix pull
//     its conversation onto a lane far longer than the others, while the
//     shorter lanes' engines ran out of queued work before it (at
//     --speed 5 on the conversation trace, TTFT p50 14% over the
//     threshold rule's, whose balance rule evens the lanes out).
//
// Ties go to the longer match, then the lower load, then the smaller tree,
// then the earlier candidate.
//
// One rule comes before the terms, the threshold rule's start-up rule
// (see seedIdle): while a candidate is idle and holds nothing, and some
// worker carries two requests, the request goes to the idle one. Its terms
// never say so, since they price this request alone: a burst of
// conversations sharing a system prompt found it on the first engine to
// hold it, which could always start the next at once on engines of 256
// slots, so that engine took all 64 conversations at 2 a second (load CoV
// 2.6 in bench's unloaded multiturn) while seven engines idled. The move
// costs the idle engine one copy of the shared prefix, after which the
// matches tie and load spreads the rest.
type waitModel struct {
	evictWeight, fleetWeight, unevenWeight, stepWeight float64
}

// waitLoad is what a candidate's expected wait needs besides its match,
// read before the selection looks at the match.
type waitLoad struct {
	costLoad
	load, limit int
	// runSec is the engine's mean request duration; cv the spread of its
	// request durations (workers.Worker.RequestSecondsCV); view reads the
	// ages of the requests in flight there, at the fleet's now.
	runSec, cv float64
	view       workers.View
	// What every candidate shares, read once per selection: a pointer,
	// since a selection among 1,000 workers copied it into each (56
	// bytes a candidate, allocated and cleared at every selection).
	*waitFleet
}

// waitFleet is what the wait mode reads once for all candidates.
type waitFleet struct {
	// rate is the candidates' mean learned prefill rate (else
	// assumedPrefillRate), the same for all: one engine's rate read apart
	// from the others' is mostly noise (a prefill the router thought cold
	// that found its prefix cached reads many times too fast), and a rate
	// too high made its engine look cheap for every cold prompt, so it
	// took them all (load CoV 0.54 on the conversation trace at --speed 5
	// on engines of 8 slots).
	rate float64
	// step is the candidates' mean decode step against the batch
	// (workers.Worker.Step; the zero step until one has decoded for this
	// router), the same for all, as rate is, each priced at its own batch.
	step workers.StepModel
	// share is step's stepShare, and slowsPer what the request slows each
	// request running beside it (see waitModel's slows): the same for
	// every candidate, so worked out once.
	share, slowsPer float64
	now             time.Time
}

// waitLoadsInto reads every candidate's load, limit, queue and learned
// speed into out (as long as ws), and what they share into f; cached,
// pending and learned are costLoads'.
func waitLoadsInto(out []waitLoad, f *waitFleet, ws []workers.View, loads []int, cached func(i int) int, pending *pendingCounts, learned func(url string) int) []waitLoad {
	*f = waitFleet{now: time.Now()}
	known, sum := 0, 0.0
	stepped := 0
	for i, w := range ws {
		out[i] = waitLoad{costLoad: costLoadOf(w, i, cached(i), pending, learned), load: loads[i], limit: w.MaxRunningRequests(),
			runSec: w.MeanRequestSeconds(), cv: w.RequestSecondsCV(), view: w, waitFleet: f}
		if r := w.PrefillTokensPerSec(); r > 0 {
			known++
			sum += r
		}
		if m, ok := w.Step(); ok {
			f.step.Base += m.Base
			f.step.PerRequest += m.PerRequest
			f.step.Tokens += m.Tokens
			stepped++
		}
	}
	f.rate = float64(assumedPrefillRate)
	if known > 0 {
		f.rate = sum / float64(known)
	}
	if stepped > 0 {
		f.step.Base /= float64(stepped)
		f.step.PerRequest /= float64(stepped)
		f.step.Tokens /= float64(stepped)
	}
	f.share = stepShare(f.step)
	f.slowsPer = f.step.PerRequest * f.step.Tokens * min(f.share/materialStepShare, 1)
	return out
}

// rereadWaitLoads reads every candidate's load (loads, read afresh) and
// queue again, in place: a selection that waited for the tree lock behind
// more others than the pick log holds (see snapshot.refresh) prices them
// as they are now. The rest (held KV, speed) stays as read before. It
// allocates nothing: it runs under the tree's lock.
func rereadWaitLoads(wl []waitLoad, ws []workers.View, loads []int, pending *pendingCounts) {
	for i, w := range ws {
		wl[i].load, wl[i].queue = loads[i], queueOf(w, i, pending)
	}
}

// start is how long a request sent to the candidate waits before its
// prefill begins: for a running slot (ahead of it: the requests beyond the
// limit, this one included) and for the prefill lane, whichever is longer.
func (l *waitLoad) start() (ahead int, slot, lane float64) {
	if l.limit > 0 && l.load >= l.limit {
		ahead = l.load - l.limit + 1
		slot = l.slotWait(ahead)
	}
	return ahead, slot, float64(l.queue) / l.rate
}

// slotWait is how long a request waits for a running slot on a full
// engine with ahead requests before it, from the engine's mean request
// duration, runSec, and how alike its requests are in length:
//
//   - alike (cv 0): they end in the order they started, each runSec after
//     it, so the slot frees when the ahead-th oldest in flight has held it
//     runSec. Requests started together end together: under late binding a
//     full engine's slots free in waves, and one request ahead can mean
//     nearly a whole request's time. Counting ends as evenly spread (below)
//     put requests behind full engines whose wave had just begun while
//     another engine had room (on engines of 8 slots under 128
//     conversations of equal answers, TTFT p99 10% over round_robin's);
//   - as likely to end in any order (cv 1 or more: how long a request has
//     run says little of when it ends), one ends about every runSec ÷ limit.
//
// Between the two, the estimates are weighed by cv. Requests beyond those
// this router has in flight there (another client's) count at the even
// rate.
func (l *waitLoad) slotWait(ahead int) float64 {
	even := float64(ahead) * l.runSec / float64(l.limit)
	if l.cv >= 1 || l.view.IsZero() {
		return even
	}
	age, rank := l.view.InFlightAge(l.now, ahead)
	if rank == 0 {
		return even
	}
	ordered := max(l.runSec-age.Seconds(), 0) + float64(ahead-rank)*l.runSec/float64(l.limit)
	return l.cv*even + (1-l.cv)*ordered
}

// waitTerms is one candidate's expected wait, term by term, in seconds
// (and the token counts they come from).
type waitTerms struct {
	matched, prefill, evict, queue, ahead, beside              int
	slot, lane, own, step, slows, evictS, fleet, uneven, total float64
	// share is how much one request lengthens a lone request's step
	// (stepShare), which scales slows below materialStepShare.
	share float64
}

// terms prices a prompt of inputLen tokens, matched tokens of which the
// candidate holds, on a candidate with load l, whose start (l.start) was
// read into st, in a fleet under pressure whose soonest start is soonest.
func (m waitModel) terms(inputLen, matched int, l *waitLoad, st waitTerms, pressure, soonest float64) waitTerms {
	t := waitTerms{matched: matched, queue: l.queue, ahead: st.ahead, slot: st.slot, lane: st.lane}
	over := 0 // the prompt's tokens that do not fit beside what is held
	if l.capacity > 0 {
		over = max(inputLen-max(l.capacity-l.held, 0), 0)
	}
	t.prefill = max(inputLen-matched, 0)
	t.evict = int(float64(t.prefill)*l.fullness + 0.5)
	t.own = float64(t.prefill+over) / l.rate
	if m.stepWeight > 0 {
		batch, sec := l.stepSeconds()
		t.step = m.stepWeight * sec
		t.beside = batch - 1
		t.share = l.share
		t.slows = float64(t.beside) * l.slowsPer
	}
	t.evictS = m.evictWeight * float64(t.evict) / l.rate
	t.fleet = pressure * m.fleetWeight * t.own
	t.uneven = pressure * m.unevenWeight * max(max(t.slot, t.lane)-soonest, 0)
	t.total = max(t.slot, t.lane) + t.own + t.step + t.slows + t.evictS + t.fleet + t.uneven
	return t
}

// materialStepShare is how much one request added to a lone request's
// decode step must lengthen it for what a request slows beside it to count
// in full (see waitModel's slows); below it the charge falls in
// proportion. On two vLLM CPU engines a second request lengthened the step
// by about a third (13 to 33 ms a token at five beside it); on the
// simulator's default engines (8 ms, and 0.05 ms per running request) by
// 0.6%, where the full charge moved requests off their prefixes for decode
// time no first token waits for.
const materialStepShare = 0.1

// stepShare is the part of a lone request's step that one more request
// adds to it: the step's steepness, the same at any batch. 0 for a step
// not yet learned.
func stepShare(m workers.StepModel) float64 {
	if one := m.Seconds(1); one > 0 {
		return m.PerRequest / one
	}
	return 0
}

// stepSeconds is the candidate's batch with this request added (at most
// its limit: the rest wait and do not decode) and its decode step.
func (l *waitLoad) stepSeconds() (batch int, sec float64) {
	batch = l.load + 1
	if l.limit > 0 {
		batch = min(batch, l.limit)
	}
	return batch, l.step.Seconds(batch)
}

// waitChoice is a wait-mode selection: what each candidate was compared
// by, the fleet's pressure and what it came from, and the winner.
type waitChoice struct {
	// cands holds by candidate what the choice compares: the whole terms
	// of 1,000 candidates made a selection allocate and clear 128 KB.
	// reason prices the two it names again from loads, the candidates'
	// loads the choice was made from.
	cands []waitCand
	loads []waitLoad
	// soonest is the least wait before the request's prefill could begin
	// on any candidate; whole the time its whole prompt takes to prefill;
	// pressure soonest ÷ whole, at most 1.
	soonest, whole, pressure float64
	chosen                   int
	// seeded: the start-up rule chose an idle candidate holding nothing
	// while a worker carried busiest requests.
	seeded  bool
	busiest int
	// What reason names, kept by settle once cands and loads go: the
	// chosen candidate's terms, and the runner-up (−1 for none) and its
	// expected wait.
	settled     bool
	named       waitTerms
	second      int
	secondTotal float64
}

// waitCand is one candidate of a waitChoice: its start (waitLoad.start),
// its match, and its expected wait.
type waitCand struct {
	ahead      int
	slot, lane float64
	matched    int
	total      float64
}

// waitScratch is what a wait-mode selection reads the candidates into:
// cache_aware reuses it from one selection to the next (see settle).
type waitScratch struct {
	fleet waitFleet
	loads []waitLoad
	cands []waitCand
}

// waitScratches reuses waitScratch between selections.
type waitScratches struct{ pool sync.Pool }

// get returns a scratch for n candidates.
func (p *waitScratches) get(n int) *waitScratch {
	sc, _ := p.pool.Get().(*waitScratch)
	if sc == nil {
		sc = new(waitScratch)
	}
	if cap(sc.loads) < n {
		sc.loads, sc.cands = make([]waitLoad, n), make([]waitCand, n)
	}
	sc.loads, sc.cands = sc.loads[:n], sc.cands[:n]
	return sc
}

// put gives sc back once the choice made with it is settled.
func (p *waitScratches) put(sc *waitScratch) {
	clear(sc.loads) // the views: a worker removed from the fleet is not kept
	p.pool.Put(sc)
}

// choose prices every candidate into c.cands (as long as matched) and picks
// the least. It allocates nothing: cache_aware calls it under its tree's
// lock.
func (m waitModel) choose(c *waitChoice, inputLen int, matched, loads []int, wl []waitLoad) {
	c.chosen, c.soonest, c.whole, c.pressure, c.loads, c.settled = 0, 0, 0, 0, wl, false
	for i := range wl {
		// Read once: a full engine's slot wait reads its requests' ages
		// under the worker's lock.
		cd := &c.cands[i]
		cd.ahead, cd.slot, cd.lane = wl[i].start()
		if w := max(cd.slot, cd.lane); i == 0 || w < c.soonest {
			c.soonest = w
		}
	}
	if len(wl) > 0 {
		c.whole = float64(inputLen) / wl[0].rate
	}
	switch {
	case c.soonest >= c.whole:
		c.pressure = 1
	case c.soonest > 0:
		c.pressure = c.soonest / c.whole
	}
	for i := range matched {
		cd := &c.cands[i]
		cd.matched = matched[i]
		cd.total = m.terms(inputLen, cd.matched, &wl[i], cd.start(), c.pressure, c.soonest).total
		if b := &c.cands[c.chosen]; i > 0 && cheaper(cd.total, cd.matched, loads[i], wl[i].cached, b.total, b.matched, loads[c.chosen], wl[c.chosen].cached) {
			c.chosen = i
		}
	}
	c.seed(loads, wl)
}

// start is the candidate's start as terms takes it.
func (cd *waitCand) start() waitTerms {
	return waitTerms{ahead: cd.ahead, slot: cd.slot, lane: cd.lane}
}

// termsOf prices candidate i again, term by term, as choose priced it.
func (c *waitChoice) termsOf(m waitModel, inputLen, i int) waitTerms {
	cd := &c.cands[i]
	return m.terms(inputLen, cd.matched, &c.loads[i], cd.start(), c.pressure, c.soonest)
}

// settle keeps what reason names and lets go of cands and loads, which
// cache_aware reuses for later selections: a decision lives as long as its
// request, and keeping every candidate's load with it held 150 KB a
// request in flight among 1,000 workers. Calls after the first do
// nothing.
func (c *waitChoice) settle(m waitModel, inputLen int) {
	if c.settled {
		return
	}
	c.second = -1
	if c.loads == nil { // never chosen: nothing to name
		c.settled, c.cands = true, nil
		return
	}
	c.named = c.termsOf(m, inputLen, c.chosen)
	c.second = runnerUp(len(c.cands), c.chosen, func(i int) float64 { return c.cands[i].total })
	if c.second >= 0 {
		c.secondTotal = c.cands[c.second].total
	}
	c.settled, c.cands, c.loads = true, nil, nil
}

// seed applies the start-up rule (see waitModel) to a choice made.
func (c *waitChoice) seed(loads []int, wl []waitLoad) {
	var idle int
	idle, c.busiest = idleEmpty(loads, func(i int) int { return wl[i].cached })
	c.seeded = idle >= 0 && idle != c.chosen
	if c.seeded {
		c.chosen = idle
	}
}

// branch names the decision as the other modes do (see matchBranch); the
// start-up rule's as the threshold rule's.
func (c *waitChoice) branch() string {
	if c.seeded {
		return "imbalance"
	}
	if c.settled {
		return matchBranch(c.named.matched)
	}
	return matchBranch(c.cands[c.chosen].matched)
}

// reason says what the chosen worker's expected wait was made of, and the
// runner-up's. It is written for every decision the log or Explain reads,
// with strconv into one buffer: through fmt, its Sprintf calls and their
// concatenations were 3.4-3.6% of the router's CPU at --log-level info
// (BENCHMARKS "The decision's reason written without fmt"). The text is
// fmt's to the byte (TestReasonTextIsFmts).
func (c *waitChoice) reason(m waitModel, ws []workers.View, inputLen int) string {
	c.settle(m, inputLen)
	b := make(reasonText, 0, 256)
	b = b.str(c.branch()).str(": ").str(ws[c.chosen].URL()).str(" ")
	if c.seeded {
		b = b.str("is idle and holds nothing while a worker carries ").int(c.busiest).str("; it ")
	}
	b = c.named.format(b.str("expects "), m, inputLen, c)
	if c.second >= 0 {
		b = b.str("; next ").str(ws[c.second].URL()).str(" ").ms(c.secondTotal)
	}
	return string(b)
}

// format appends the terms of one candidate's expected wait to b.
func (t waitTerms) format(b reasonText, m waitModel, inputLen int, c *waitChoice) reasonText {
	b = b.ms(t.total).str(" = max(slot ").ms(t.slot)
	if t.ahead > 0 {
		b = b.str(" (").int(t.ahead).str(" ahead)")
	}
	b = b.str(", lane ").ms(t.lane).str(" (").int(t.queue).str(" queued)) + own ").ms(t.own).
		str(" (").int(inputLen).str(" prompt − ").int(t.matched).str(" cached)")
	if t.step > 0 {
		b = b.str(" + step ").ms(t.step).str(" (").g(m.stepWeight).str(" steps)")
	}
	if t.slows > 0 {
		b = b.str(" + slows ").ms(t.slows).str(" (").int(t.beside).str(" running beside it")
		if t.share < materialStepShare {
			b = b.str(", × ").fixed(t.share/materialStepShare, 2).str(": a request lengthens a step ").
				fixed(100*t.share, 1).str("%")
		}
		b = b.str(")")
	}
	if t.evictS > 0 {
		b = b.str(" + evict ").ms(t.evictS).str(" (").g(m.evictWeight).str(" × ").int(t.evict).str(")")
	}
	if t.fleet > 0 {
		cmp := "<"
		if c.soonest >= c.whole {
			cmp = "≥"
		}
		b = b.str(" + fleet ").ms(t.fleet).str(" (pressure ").fixed(c.pressure, 2).str(" × ").g(m.fleetWeight).
			str(": soonest start ").ms(c.soonest).str(" ").str(cmp).str(" whole prefill ").ms(c.whole).str(")")
	}
	if t.uneven > 0 {
		b = b.str(" + uneven ").ms(t.uneven).str(" (pressure ").fixed(c.pressure, 2).str(" × ").g(m.unevenWeight).
			str(" × (start ").ms(max(t.slot, t.lane)).str(" − soonest ").ms(c.soonest).str("))")
	}
	return b
}

// reasonText is a decision's reason being written; each method appends
// what the fmt verb in its comment prints.
type reasonText []byte

// str appends s (%s).
func (b reasonText) str(s string) reasonText { return append(b, s...) }

// int appends n (%d).
func (b reasonText) int(n int) reasonText { return strconv.AppendInt(b, int64(n), 10) }

// g appends x (%g).
func (b reasonText) g(x float64) reasonText { return strconv.AppendFloat(b, x, 'g', -1, 64) }

// fixed appends x with prec decimals (%.<prec>f).
func (b reasonText) fixed(x float64, prec int) reasonText {
	return strconv.AppendFloat(b, x, 'f', prec, 64)
}

// ms appends seconds as whole milliseconds (%.0fms of 1000×sec).
func (b reasonText) ms(sec float64) reasonText { return b.fixed(1000*sec, 0).str("ms") }

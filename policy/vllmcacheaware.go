package policy

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/tree"
	"github.com/kvgate/kvgate/workers"
)

// VllmCacheAware is SMG's vllm_cache_aware policy
// (SMG's vllm-cache-aware-design.md §9.1): instead of a token tree it keeps a
// table of KV blocks (tree.BlockIndex), which mirrors vLLM's automatic
// prefix caching at its own granularity, and sends a request to the worker
// holding the most leading blocks of its prompt, unless that worker is busy.
//
// The decision, over the healthy candidates:
//
//  1. cache_hit: the best match (most leading blocks; equal matches go to
//     the less loaded, then the earlier candidate) covers more than
//     CacheThreshold of the prompt's whole blocks, and its worker's load is
//     acceptable: below LoadFactor × the average load, or the lowest load
//     there is (which covers an idle fleet). Where every candidate reports
//     its running-request limit, the load is also acceptable below that
//     limit while at most twice the average and one request more, and
//     while some engine is idle and holds no block, only a load of at most
//     one (see boundByRoom).
//  2. overloaded: the match was good enough but the load was not; the
//     least loaded worker (ties: the earlier candidate).
//  3. cache_miss: otherwise the least loaded worker.
//
// In ModeCost the worker of least cost wins instead (see costModel), and in
// ModeWait the worker of least expected wait (see waitModel), its match
// counted in tokens (whole blocks).
//
// The ratio counts whole blocks on both sides, as SMG does: a prompt
// shorter than one block has none and is always a miss. Whatever the branch,
// the prompt's blocks are then recorded for the chosen worker (not for a
// DryRun), since serving it puts them in that engine's cache.
//
// Unlike cache_aware, matching and recording are two steps: two concurrent
// requests with the same new prefix may both miss and land on different
// workers, as in SMG.
//
// Predictions can be made exact from the engines' KV events: Confirm,
// Unconfirm and Clear apply stored, removed and cleared blocks. Observe
// records a finished request's reply with its prompt, for the next turn
// of a conversation, which can arrive before the reply's events do; and
// on an engine that queues, the prediction keeps only what a request in
// flight there shares (inFlight.predict), as cache_aware's does. The index is
// bounded per worker (MaxBlocksPerBackend, within a quarter at all times);
// Run trims it exactly every EvictionInterval. It is safe for concurrent use.
type VllmCacheAware struct {
	index         *tree.BlockIndex
	blockSize     int
	threshold     float64
	loadFactor    float64
	evictInterval time.Duration
	evicted       atomic.Uint64
	cands         indexCache // the candidates' URLs, as the index's backends
	// removed remembers the blocks KV events removed lately, so that
	// Observe does not record a reply's blocks the engine already evicted.
	removed *removals
	// flight holds the prompts placed and not yet observed, per worker,
	// for predictions on engines that queue (see inFlight.predict).
	flight *inFlight[*vcaFlight]
	// scratch is the wait mode's per-candidate reading, reused.
	scratch waitScratches
	misses  missCounters // predictions that missed, by cause
	log     *slog.Logger
	// cost, in ModeCost, and wait, in ModeWait, replace the threshold
	// rule (see costModel, waitModel).
	cost *costModel
	wait *waitModel

	// Workers with KV events confirm and remove blocks through it.
	*eventMirror
}

// NewVllmCacheAware builds a vllm_cache_aware policy configured by
// o.VllmCacheAware, or returns its validation error.
func NewVllmCacheAware(o Options) (*VllmCacheAware, error) {
	cfg := o.VllmCacheAware
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	x, err := tree.NewBlockIndex(tree.BlockIndexConfig{
		BlockSize:           cfg.BlockSize,
		MaxBlocksPerBackend: cfg.MaxBlocksPerBackend,
		Hash:                cfg.BlockHash,
	})
	if err != nil {
		return nil, fmt.Errorf("vllm_cache_aware block index: %w", err)
	}
	p := &VllmCacheAware{
		index:         x,
		blockSize:     cfg.BlockSize,
		threshold:     cfg.CacheThreshold,
		loadFactor:    cfg.LoadFactor,
		evictInterval: cfg.EvictionInterval,
		removed:       newRemovals(cfg.BlockSize),
		flight:        newInFlight[*vcaFlight](),
		log:           o.Logger,
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if cfg.Mode == ModeCost {
		p.cost = &costModel{decodeWeight: cfg.DecodeWeight, evictWeight: cfg.EvictWeight}
	}
	if cfg.Mode == ModeWait {
		p.wait = &waitModel{evictWeight: cfg.EvictWeight, fleetWeight: cfg.FleetWeight, unevenWeight: cfg.UnevenWeight, stepWeight: cfg.StepWeight}
	}
	p.eventMirror = newEventMirror(blockIndex{p}, cfg.BlockSize, o.Logger)
	return p, nil
}

func (*VllmCacheAware) Name() string { return "vllm_cache_aware" }

// PageSize is the tokens per block the policy matches by.
func (p *VllmCacheAware) PageSize() int { return p.blockSize }

// Select chooses among the healthy candidates; see VllmCacheAware for the
// rules. Decision.Matched holds every candidate's match in tokens, healthy
// or not, so Explain can show a better-matching worker that was passed over.
func (p *VllmCacheAware) Select(_ context.Context, req *Request, candidates []workers.View) (Decision, error) {
	ws := healthy(req, candidates)
	if len(ws) == 0 {
		return Decision{}, ErrNoHealthyWorker
	}
	removals := p.removed.now() // before the match: removals after it are news
	keys := p.index.Keys(req.InputIDs)
	x := p.cands.of(ws, nil)
	matched := p.index.MatchAmong(keys, x.roster)

	loads := make([]int, len(ws))
	sum, best, least := 0, 0, 0
	for i, w := range ws {
		loads[i] = w.Load()
		sum += loads[i]
		if loads[i] < loads[least] {
			least = i
		}
		if matched[i] > matched[best] || matched[i] == matched[best] && loads[i] < loads[best] {
			best = i
		}
	}
	s := vcaChoice{ws: ws, loads: loads, matched: matched, best: best, blocks: len(keys)}
	s.avg = float64(sum) / float64(len(ws))
	if s.blocks > 0 {
		s.ratio = float64(matched[best]) / float64(s.blocks)
	}
	// The lowest load is acceptable whatever the average: the fallback
	// could only pick a worker as loaded and without the cache.
	acceptable := loads[best] == loads[least] || float64(loads[best]) < p.loadFactor*s.avg
	if allReportCapacity(ws) {
		acceptable, s.room, s.seeding = p.boundByRoom(ws, loads, best, sum, acceptable)
	}
	// The cost and wait modes count matches and what each engine holds in
	// tokens (whole blocks). A request whose engine computes its prompt
	// whole (Request.ComputesPrompt) is estimated with no match: it saves
	// no prefill.
	var tokens []int
	cached := func(i int) int { return p.index.BackendBlocks(ws[i].URL()) * p.blockSize }
	if p.cost != nil || p.wait != nil {
		tokens = make([]int, len(ws))
		if !req.ComputesPrompt {
			for i, n := range matched {
				tokens[i] = n * p.blockSize
			}
		}
	}
	switch {
	case p.cost != nil:
		s.cost = &costChoice{terms: make([]costTerms, len(ws))}
		p.cost.choose(s.cost, len(req.InputIDs), tokens, loads, costLoads(ws, cached, nil, p.learnedCapacity))
		s.chosen, s.branch, s.inputLen = s.cost.chosen, s.cost.branch(), len(req.InputIDs)
	case p.wait != nil:
		sc := p.scratch.get(len(ws))
		defer p.scratch.put(sc) // the reason, written below, settles the choice
		s.wait = &waitChoice{cands: sc.cands}
		p.wait.choose(s.wait, len(req.InputIDs), tokens, loads, waitLoadsInto(sc.loads, &sc.fleet, ws, loads, cached, nil, p.learnedCapacity))
		s.chosen, s.branch, s.inputLen = s.wait.chosen, s.wait.branch(), len(req.InputIDs)
	case s.ratio > p.threshold && acceptable:
		s.chosen, s.branch = best, "cache_hit"
	case s.ratio > p.threshold:
		s.chosen, s.branch = least, "overloaded"
	default:
		s.chosen, s.branch = least, "cache_miss"
	}
	chosen := ws[s.chosen]
	if !req.DryRun {
		p.index.Record(keys, chosen.URL())
	}

	d := Decision{
		Worker:                chosen.Worker(),
		PredictedCachedTokens: matched[s.chosen] * p.blockSize,
		Branch:                s.branch,
		Reason:                p.reason(&s),
	}
	var f *vcaFlight
	if !req.DryRun {
		f = &vcaFlight{p: p, load: loads[s.chosen], limit: chosen.MaxRunningRequests(), removals: removals}
		d.keeper = f
	}
	p.flight.place(&d, chosen, req, p.blockSize, p.isExact(chosen.URL()), f)
	for i := range matched { // blocks to tokens, now that the reason is written
		matched[i] *= p.blockSize
	}
	d.Matched = &Matches{index: x.pos, tokens: matched}
	if rest := x.outside(candidates); rest != nil {
		d.Matched.other = make(map[string]int, len(rest))
		for i, n := range p.index.Match(keys, rest) {
			d.Matched.other[rest[i]] = n * p.blockSize
		}
	}
	return d, nil
}

// boundByRoom applies the load bound where every candidate reports its
// running-request limit, given SMG's verdict (acceptable): it returns
// whether worker best may take the request, and whether room (not SMG's
// rule) decided it, or whether an idle engine holding nothing (seeding)
// did. sum is the candidates' total load.
//
// While some engine is idle and holds no block (a fleet starting up, or
// one just joined), best takes the request only if it carries at most one
// other: the request goes to an idle engine instead, which then holds its
// prefix. Every engine so comes to hold a burst's shared system prompt, and
// equal matches then spread the burst by load. SMG's rule alone left the
// eighth engine of 8 idle through a whole burst (7 holders at equal load
// stay under 1.25 × the average), and the bound below left half of them.
//
// Otherwise an engine below its limit keeps the request while it carries
// at most twice the average load and one request more. SMG's bound
// (LoadFactor × the average) moved conversations off their caches on the
// swings of in-flight counts: on multiturn at 256 users, 188 moves in 2,048
// requests at loads as small as 24 against an average of 19 on engines of
// 256 slots, each losing the conversation's history, about 157K tokens in
// all and the whole gap to the oracle's hit rate. Below its limit the
// engine starts the request at once, as the least loaded would, but
// without the prefill a move costs. In-flight counts swing most where a
// wave of turns begins (loads 13, 7, 11, 2, 2, 1, 4 and 8: 13 against an
// average of 6), so the bound is wide; it still keeps a hot prefix from
// filling an engine of hundreds of slots (a load factor of 100 sent every
// conversation to one engine, load CoV 2.6). The one request more keeps an
// engine of 2 slots running one request, with its cache, beside an idle
// one.
func (p *VllmCacheAware) boundByRoom(ws []workers.View, loads []int, best, sum int, acceptable bool) (ok, room, seeding bool) {
	for i, w := range ws {
		if loads[i] == 0 && p.index.BackendBlocks(w.URL()) == 0 {
			return loads[best] <= 1, false, true
		}
	}
	if acceptable {
		return true, false, false
	}
	if loads[best] >= ws[best].MaxRunningRequests() {
		return false, false, false
	}
	ok = loads[best]*len(ws) <= 2*sum+len(ws)
	return ok, ok, false
}

// vcaChoice is what a selection found, for its reason.
type vcaChoice struct {
	ws                   []workers.View
	loads, matched       []int
	best, chosen, blocks int
	avg, ratio           float64
	branch               string
	// room: the best worker was past the load factor, and kept the
	// request because its engine had room; seeding: an engine was idle
	// and held no block (see boundByRoom).
	room, seeding bool
	// In ModeCost (ModeWait): the candidates' costs (expected waits), and
	// the prompt's length.
	cost     *costChoice
	wait     *waitChoice
	inputLen int
}

// reason says why s.chosen won, for logs and Explain.
func (p *VllmCacheAware) reason(s *vcaChoice) string {
	b, c := s.best, s.chosen
	if s.cost != nil {
		return s.cost.reason(*p.cost, s.ws, s.inputLen)
	}
	if s.wait != nil {
		return s.wait.reason(*p.wait, s.ws, s.inputLen)
	}
	switch s.branch {
	case "cache_hit":
		if s.room {
			return fmt.Sprintf("cache_hit: %s holds %d of %d prompt blocks (%.0f%% > %.0f%%), load %d, past ×%g the average %.2f but below its running-request limit %d and within twice the average and one more",
				s.ws[c].URL(), s.matched[c], s.blocks, 100*s.ratio, 100*p.threshold, s.loads[c], p.loadFactor, s.avg, s.ws[c].MaxRunningRequests())
		}
		return fmt.Sprintf("cache_hit: %s holds %d of %d prompt blocks (%.0f%% > %.0f%%), load %d (average %.2f, limit ×%g)",
			s.ws[c].URL(), s.matched[c], s.blocks, 100*s.ratio, 100*p.threshold, s.loads[c], s.avg, p.loadFactor)
	case "overloaded":
		if s.seeding {
			return fmt.Sprintf("overloaded: %s holds %d of %d prompt blocks (%.0f%% > %.0f%%) but carries %d while an engine is idle and holds no block; least loaded %s (load %d)",
				s.ws[b].URL(), s.matched[b], s.blocks, 100*s.ratio, 100*p.threshold, s.loads[b], s.ws[c].URL(), s.loads[c])
		}
		return fmt.Sprintf("overloaded: %s holds %d of %d prompt blocks (%.0f%% > %.0f%%) but its load %d is not below %.2f (×%g the average %.2f); least loaded %s (load %d)",
			s.ws[b].URL(), s.matched[b], s.blocks, 100*s.ratio, 100*p.threshold, s.loads[b], p.loadFactor*s.avg, p.loadFactor, s.avg, s.ws[c].URL(), s.loads[c])
	}
	return fmt.Sprintf("cache_miss: best match %d of %d prompt blocks (%.0f%%, not above %.0f%%); least loaded %s (load %d)",
		s.matched[b], s.blocks, 100*s.ratio, 100*p.threshold, s.ws[c].URL(), s.loads[c])
}

// Confirm records that worker holds the blocks of path, a token sequence
// from the start of a prompt: for a KV "stored" event, with the path from
// the root through the stored blocks. A partial last block is ignored.
func (p *VllmCacheAware) Confirm(worker string, path []uint32) {
	p.index.Record(p.index.Keys(path), worker)
}

// Unconfirm removes worker's hold on the last pages whole blocks (of
// --vllm-block-size tokens) of path, a token sequence from the start of a
// prompt: for a KV "removed" event, with the path from the root through the
// removed blocks. Engines remove the deepest blocks first; removing blocks
// in the middle of what a worker holds would leave the binary search
// counting the blocks beyond them.
func (p *VllmCacheAware) Unconfirm(worker string, path []uint32, pages int) {
	if pages <= 0 {
		return
	}
	keys := p.index.Keys(path)
	p.index.RemoveBlocks(worker, keys[len(keys)-min(pages, len(keys)):])
}

// Clear forgets everything worker holds: for a KV "cleared" event, or an
// engine that restarted.
func (p *VllmCacheAware) Clear(worker string) { p.index.RemoveBackend(worker) }

// Forget drops a worker removed from the fleet. A worker that only turns
// unhealthy keeps its blocks, since it may recover with its cache intact.
func (p *VllmCacheAware) Forget(url string) {
	p.eventMirror.forget(url)
	p.removed.forget(url)
	p.flight.forget(url)
	p.index.RemoveBackend(url)
}

// ForgetCache drops the blocks of a worker whose engine flushed its cache.
func (p *VllmCacheAware) ForgetCache(url string) {
	p.eventMirror.clearCache(url)
	p.index.RemoveBackend(url)
}

// Observe records a completed request's reply for its worker: the blocks
// of the prompt followed by the output (but its last token, whose KV the
// engine has not computed), which the engine keeps in its prefix cache
// with the prompt. The next turn of a conversation repeats the reply, and
// it often arrives before the engine's stored events for the reply do:
// without this, 74–75 of 512 requests (multi-turn, 64 conversations at
// two requests a second, on simulated vLLM engines) were predicted one
// reply short.
//
// The prompt is recorded again with the reply, as a chain from block 0:
// the engine has just used it, and the index's eviction keeps a worker's
// blocks prefix-closed only if the tail of a chain is never newer than its
// head. Blocks that KV events removed from the worker since the decision
// are not recorded again, nor any after the first of them (see removals):
// an engine under pressure can evict a finished request's blocks before
// its answer reaches the router.
//
// A failed request records nothing more (Select recorded its prompt, as
// SMG does), nor a dry run, nor a draining worker's request, which would
// bring a worker being removed back into the index. Whatever the outcome,
// the request is no longer in flight (see inFlight.predict); a report
// other than the prediction is counted by cause (PredictionMisses), as
// cache_aware counts its own.
func (p *VllmCacheAware) Observe(req *Request, d Decision, o Outcome) {
	f, ok := d.keeper.(*vcaFlight)
	if !ok || req == nil || d.Worker == nil {
		return // a dry run, or a decision this policy did not make
	}
	p.flight.done(d.Worker.URL(), f, o.Err == nil || o.CachedTokens > 0, cachedReply(o.OutputIDs))
	if d.Worker.Draining() {
		return
	}
	if reported := max(o.CachedTokens, 0); ((o.Err == nil && !o.Unreported) || reported > 0) && reported != d.PredictedCachedTokens {
		// The index does not tell blocks the events confirmed from those
		// Select recorded: the whole prediction counts as confirmed.
		p.misses.note(p.log, missed{req: req, d: d, pageSize: p.blockSize, confirmed: d.PredictedCachedTokens,
			reported: reported, load: f.load, limit: f.limit, events: p.isExact(d.Worker.URL())})
	}
	reply := cachedReply(o.OutputIDs)
	if o.Err != nil || len(reply) == 0 {
		return
	}
	prompt := req.InputIDs
	if (len(prompt)+len(reply))/p.blockSize == len(prompt)/p.blockSize {
		return // the reply completes no block
	}
	url := d.Worker.URL()
	cut := p.removed.cut(url, f.removals, prompt, reply)
	if cut/p.blockSize <= len(prompt)/p.blockSize {
		return // the engine evicted part of the prompt, or the reply's first block
	}
	p.index.Record(p.index.KeysJoined(prompt, reply)[:cut/p.blockSize], url)
}

// vcaFlight is what vllm_cache_aware keeps of a decision until its outcome
// (Observe) or its abandonment (Decision.Abandoned): the request's name in
// flight (see inFlight), the chosen worker's load and running limit at the
// decision, to classify a miss (see MissQueued), and the number of the KV
// removals applied when it matched, so that Observe does not record again
// blocks the engine removed since (see removals).
type vcaFlight struct {
	p           *VllmCacheAware
	load, limit int
	removals    uint64
}

func (f *vcaFlight) abandoned(d Decision) {
	if d.Worker != nil {
		f.p.flight.abandon(d.Worker.URL(), f)
	}
}

// blockIndex is vllm_cache_aware's block index seen as an eventMirror's
// index: stored blocks are recorded for the worker, removed ones (and
// whatever the engine cannot reach below them) dropped.
type blockIndex struct{ p *VllmCacheAware }

func (x blockIndex) confirm(worker string, path []uint32) { x.p.Confirm(worker, path) }
func (x blockIndex) drop(worker string, path []uint32, pages int) {
	x.p.removed.removed(worker, path, pages)
	x.p.Unconfirm(worker, path, pages)
}
func (x blockIndex) clear(worker string) { x.p.Clear(worker) }

// Run evicts every worker down to MaxBlocksPerBackend every
// EvictionInterval until ctx ends (with no interval, it only waits).
func (p *VllmCacheAware) Run(ctx context.Context) {
	if p.evictInterval <= 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(p.evictInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n := p.index.Evict(); n > 0 {
				p.evicted.Add(uint64(n))
			}
		}
	}
}

// PredictionMisses returns how many predictions missed, by cause (see
// MissCause). The index does not tell confirmed blocks from recorded ones,
// so a prediction above the report counts as evicted or queued, never as
// speculation.
func (p *VllmCacheAware) PredictionMisses() map[string]uint64 { return p.misses.byCause() }

// IndexStats reports the block index's size (blocks, per-worker blocks,
// approximate bytes).
func (p *VllmCacheAware) IndexStats() tree.BlockIndexStats { return p.index.Stats() }

// EvictedBlocks is the number of (block, worker) holdings Run has evicted.
func (p *VllmCacheAware) EvictedBlocks() uint64 { return p.evicted.Load() }

package policy

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/internal/lograte"
	"github.com/kvgate/kvgate/tree"
	"github.com/kvgate/kvgate/workers"
)

// cacheIndex is what an eventMirror keeps current: a policy's record of the
// whole pages each worker's engine holds, keyed by token content.
type cacheIndex interface {
	// confirm records that worker's engine holds every page of path.
	confirm(worker string, path []uint32)
	// drop records that the last pages of path left worker's engine, and
	// with them whatever the index has below them.
	drop(worker string, path []uint32, pages int)
	// clear forgets everything confirmed or expected on worker.
	clear(worker string)
}

// eventMirror applies the engines' KV events to a cacheIndex. It implements
// workers.KVEventHandler, so a policy that embeds it receives the events of
// its workers.
//
// Engines name blocks with their own hashes (vLLM's are seeded per process),
// which the router never tries to reproduce: one tree.Mirror per worker and
// rank resolves those names to token paths, and the index is keyed by the
// tokens. Consecutive stored events that continue one chain (engines send one
// event per page) are applied as one path, so a long prompt costs one index
// insertion, not one per page.
//
// Everything an engine writes here is bounded, since an engine can be
// hostile or broken: a worker's events are taken only from the
// data-parallel rank the fleet is configured with (see wantRank), so a
// worker has one mirror; that mirror holds at most maxBlocks blocks (a
// byte budget, see mirrorBudget), of which at most maxDetached blocks that
// do not attach (unknown parents), the oldest forgotten first; past
// maxBlocks it is reset. Each bound counts the blocks it dropped (EventStats
// Dropped) and warns at most once a minute.
type eventMirror struct {
	idx         cacheIndex
	pageSize    int
	maxBlocks   int
	maxDetached int
	log         *slog.Logger
	warn        [dropReasons]*lograte.Limiter

	mu      sync.Mutex
	mirrors map[mirrorKey]*rankMirror
	exact   map[string]bool   // workers whose events are the truth
	refused map[string]string // workers whose events cannot be used, and why

	// evicting is set once any engine's events showed it evict (see
	// learnedCapacity), and never cleared: until then no engine has a
	// learned capacity, and selections skip asking for one.
	evicting atomic.Bool

	applied   [4]atomic.Uint64 // events applied, by workers.KVEventKind
	unusable  atomic.Uint64    // batches ignored because the worker's events cannot be used
	overflows atomic.Uint64    // mirrors that outgrew maxBlocks and were reset
	dropped   [dropReasons]atomic.Uint64
}

// dropReason is why a bound dropped an engine's blocks.
type dropReason int

const (
	// dropRank: a batch of a data-parallel rank the fleet is not
	// configured with.
	dropRank dropReason = iota
	// dropDetached: blocks that never attached, forgotten past the
	// detached bound.
	dropDetached
	// dropOverflow: a mirror past its bound, reset.
	dropOverflow
	dropReasons
)

// String is the reason as EventStats.Dropped and the metric name it.
func (r dropReason) String() string {
	return [dropReasons]string{"rank", "detached", "overflow"}[r]
}

// eventWarnEvery is the least time between two WARN lines of one bound.
const eventWarnEvery = time.Minute

type mirrorKey struct {
	worker string
	rank   int
}

// rankMirror follows one rank of one worker.
type rankMirror struct {
	mu sync.Mutex
	m  *tree.Mirror

	// Scratch of ApplyKVEvents, under mu: the chain being gathered, what
	// the mirror said of its first blocks, and the removals to apply
	// before it. What gather looked up is handed on (tree.Ref), so that
	// each block of the batch is looked up once.
	blocks []tree.MirrorBlock
	found  []tree.Ref
	gone   []tree.Ref
	// chain holds the hashes of blocks[:indexed], built only when a
	// removal names a hash the mirror does not know (see gather).
	chain   map[int64]struct{}
	indexed int

	// full is the most tokens the engine was seen to hold as it evicted
	// (see learnedCapacity); 0 until it has evicted.
	full atomic.Int64
}

// inChain reports whether h is the hash of a block gathered so far.
func (rm *rankMirror) inChain(h int64) bool {
	if rm.chain == nil {
		rm.chain = map[int64]struct{}{}
	}
	for ; rm.indexed < len(rm.blocks); rm.indexed++ {
		rm.chain[rm.blocks[rm.indexed].Hash] = struct{}{}
	}
	_, ok := rm.chain[h]
	return ok
}

// mirrorBudget bounds the memory of one worker's mirror: 512 MiB, about
// 1.8M pages of 16 tokens (29M tokens), far beyond the cache of any single
// engine today. mirrorBlockBytes is what a block costs beside its tokens
// (the block, its map entries and links): BenchmarkHostileEngineMirror
// measured about 290 bytes for a 16-token block that never attached, before
// a block kept its first child's link inline (16 bytes more per block, one
// allocation less). A mirror past its bound is reset.
const (
	mirrorBudget     = 512 << 20
	mirrorBlockBytes = 240
	// maxMirrorBlocks caps the bound for tiny pages.
	maxMirrorBlocks = 1 << 22
	// mirrorDetachedShare is the share of a mirror's blocks that may be
	// detached: blocks stored below a parent the mirror does not know
	// (after joining mid-stream, legitimately) are kept, to attach if the
	// parent comes, up to 1/8 of the bound.
	mirrorDetachedShare = 8
)

// mirrorBlocks is the bound of a mirror of pageSize-token blocks.
func mirrorBlocks(pageSize int) int {
	return min(mirrorBudget/(mirrorBlockBytes+4*pageSize), maxMirrorBlocks)
}

func newEventMirror(idx cacheIndex, pageSize int, log *slog.Logger) *eventMirror {
	if log == nil {
		log = slog.Default()
	}
	e := &eventMirror{idx: idx, pageSize: pageSize, log: log,
		mirrors: map[mirrorKey]*rankMirror{}, exact: map[string]bool{}, refused: map[string]string{}}
	for r := range e.warn {
		e.warn[r] = lograte.New(eventWarnEvery)
	}
	n := mirrorBlocks(pageSize)
	e.limit(n, n/mirrorDetachedShare)
	return e
}

// limit sets the bounds of the mirrors made from now on.
func (e *eventMirror) limit(maxBlocks, maxDetached int) {
	e.maxBlocks, e.maxDetached = maxBlocks, maxDetached
}

// wantRank is the data-parallel rank whose events are worker's: r for a
// rank target named url@r (the router routes to each rank), 0 for any
// other worker (the engine places requests on its ranks itself, and the
// router follows the first). Batches of other ranks are an engine
// misconfigured, or hostile: each would be a mirror of its own.
func wantRank(worker string) int {
	if _, r, ok := workers.SplitRankName(worker); ok {
		return r
	}
	return 0
}

// drop counts n blocks dropped for reason, and warns (at most once a
// minute per reason).
func (e *eventMirror) drop(r dropReason, n int, msg string, args ...any) {
	e.dropped[r].Add(uint64(n))
	e.warn[r].Warn(e.log, msg, append(args, "blocks", n, "reason", r.String())...)
}

// storedBlocks counts the blocks b stores.
func storedBlocks(b *workers.KVEventBatch) int {
	n := 0
	for i := range b.Events {
		if b.Events[i].Kind == workers.KVStored {
			n += len(b.Events[i].Blocks)
		}
	}
	return n
}

// rank returns the mirror of worker's rank, and why the worker's events are
// refused ("" when they are not).
func (e *eventMirror) rank(worker string, rank int) (*rankMirror, string) {
	k := mirrorKey{worker, rank}
	e.mu.Lock()
	defer e.mu.Unlock()
	rm, ok := e.mirrors[k]
	if !ok {
		rm = &rankMirror{m: tree.NewMirror(e.pageSize, e.maxBlocks)}
		rm.m.LimitDetached(e.maxDetached)
		e.mirrors[k] = rm
	}
	return rm, e.refused[worker]
}

// ApplyKVEvents applies one batch of worker's events to the index.
//
// A full engine makes room for each new page by evicting a leaf, so the
// batch that admits a prompt interleaves its stored pages with removals of
// an older prompt's pages, last page first (as workers/sim and SGLang's
// radix cache do). Applied in that order, every stored page is a chain of
// its own and every removal a path of its own, each costing a descent of
// the index from the root: quadratic in the prompt's pages. So a removal
// that commutes with the chain being gathered (see gather) is applied
// before it, with the other such removals in one Mirror.Remove, which
// returns a run of a chain evicted leaf first as one Span; the chain is
// then one insertion. The index ends as it would in the events' order.
func (e *eventMirror) ApplyKVEvents(worker string, b *workers.KVEventBatch) {
	if want := wantRank(worker); b.DPRank != want {
		e.drop(dropRank, storedBlocks(b), "KV events of a data-parallel rank the fleet is not configured with dropped",
			"worker", worker, "rank", b.DPRank, "configured_rank", want)
		return
	}
	rm, refused := e.rank(worker, b.DPRank)
	if refused != "" {
		e.unusable.Add(1)
		return
	}
	rm.mu.Lock()
	defer rm.mu.Unlock()
	evicted := rm.m.Evicted()
	defer func() {
		if n := rm.m.Evicted() - evicted; n > 0 {
			e.drop(dropDetached, n, "KV event blocks that never attached (unknown parents) forgotten past the mirror's bound",
				"worker", worker, "bound", e.maxDetached)
		}
	}()
	// An engine evicts only once its cache is full: what it held then is
	// its capacity, for engines that do not report one (see
	// learnedCapacity). Within a batch it holds at most that, so the
	// larger of the counts before and after is the closest reading.
	before, removed := rm.m.Len(), false
	defer func() {
		if removed {
			if n := int64(max(before, rm.m.Len()) * e.pageSize); n > rm.full.Load() {
				rm.full.Store(n)
				e.evicting.Store(true)
			}
		}
	}()
	evs := b.Events
	rm.prefetch(evs)
	for i := 0; i < len(evs); {
		ev := &evs[i]
		switch ev.Kind {
		case workers.KVStored:
			j, stored, hoisted := rm.gather(evs, i)
			if len(rm.gone) > 0 {
				removed = true
				e.dropRuns(worker, rm.m.RemoveFound(rm.gone))
				e.applied[workers.KVRemoved].Add(uint64(hoisted))
			}
			e.applied[workers.KVStored].Add(uint64(stored))
			ok := e.storeChain(worker, rm, evs[i:j], stored)
			clear(rm.blocks) // keep no tokens of the batch
			if !ok {
				return
			}
			i = j
			continue
		case workers.KVRemoved:
			removed = removed || len(ev.Hashes) > 0
			e.dropRuns(worker, rm.m.Remove(ev.Hashes))
		case workers.KVCleared:
			rm.m.Clear()
			e.idx.clear(worker)
		}
		e.applied[ev.Kind&3].Add(1)
		i++
	}
}

// prefetch reads where the mirror's lookups of the blocks evs store and
// remove start. Each is looked up once, in gather or in the Store or
// Remove after it, and those lookups come one after another, each behind
// work that waits on the one before; read first with no load waiting on
// another, their cache misses (the mirror is a cache's worth of blocks)
// overlap.
func (rm *rankMirror) prefetch(evs []workers.KVEvent) {
	for i := range evs {
		ev := &evs[i]
		switch ev.Kind {
		case workers.KVStored:
			for k := range ev.Blocks {
				rm.m.Prefetch(ev.Blocks[k].Hash)
			}
		case workers.KVRemoved:
			for _, h := range ev.Hashes {
				rm.m.Prefetch(h)
			}
		}
	}
}

// gather collects into rm.blocks the chain that stored event evs[i] starts:
// it and the stored events after it that continue it, each naming the
// chain's last block as its parent. Removed events between them join
// rm.gone, to be applied before the chain, when every block of the chain so
// far is new to the mirror and every hash they name is not the chain's
// parent and either a block the mirror knows that is a leaf once the
// hashes before it in rm.gone are removed (Mirror.LeafAfter), or a hash
// the mirror does not know (blocks stored before a reset) that is not in
// the chain so far. Such a removal detaches at most the block itself, which
// is neither in the chain nor above it nor below it, so it commutes with
// storing the chain.
// It returns the index after the last event taken, and how many stored and
// removed events were taken.
func (rm *rankMirror) gather(evs []workers.KVEvent, i int) (next, stored, hoisted int) {
	first := &evs[i]
	rm.blocks = toMirrorBlocks(rm.blocks[:0], first.Blocks)
	rm.found, rm.gone = rm.found[:0], rm.gone[:0]
	if rm.indexed > 0 {
		clear(rm.chain)
		rm.indexed = 0
	}
	// fresh: no block gathered so far is known to the mirror. It matters
	// only when a removal is to be hoisted, so it is computed then, over
	// the blocks gathered up to there: a chain with no removal between its
	// events (an engine with room) costs no lookup here, where each
	// lookup in a map of a cache's worth of blocks is a cache miss. What
	// the lookups found (rm.found, blocks[:len(rm.found)]) goes to the
	// Store.
	fresh := true
	continues := func(ev *workers.KVEvent) bool {
		return ev.Kind == workers.KVStored && ev.HasParent && len(rm.blocks) > 0 &&
			ev.Parent == rm.blocks[len(rm.blocks)-1].Hash
	}
	commutes := func(ev *workers.KVEvent) bool {
		if ev.Kind != workers.KVRemoved {
			return false
		}
		for fresh && len(rm.found) < len(rm.blocks) {
			f := rm.m.Find(rm.blocks[len(rm.found)].Hash)
			rm.found = append(rm.found, f)
			fresh = !f.Known()
		}
		if !fresh {
			return false
		}
		n := len(rm.gone)
		for _, h := range ev.Hashes {
			ok := !(first.HasParent && h == first.Parent)
			var f tree.Ref
			if ok {
				f = rm.m.Find(h)
			}
			if ok && f.Known() {
				ok = rm.m.LeafAfter(f, rm.gone)
			} else if ok {
				ok = !rm.inChain(h)
			}
			if !ok {
				rm.gone = rm.gone[:n]
				return false
			}
			rm.gone = append(rm.gone, f)
		}
		return true
	}
	stored, next = 1, i+1
	for j := i + 1; j < len(evs); j++ {
		ev := &evs[j]
		switch {
		case continues(ev):
			rm.blocks = toMirrorBlocks(rm.blocks, ev.Blocks)
			stored, next = stored+1, j+1
			continue
		case j+1 < len(evs) && continues(&evs[j+1]) && commutes(ev):
			hoisted++
			continue
		}
		break
	}
	return next, stored, hoisted
}

// dropRuns drops from the index the PageRuns a removal detached.
func (e *eventMirror) dropRuns(worker string, runs []tree.PageRun) {
	for _, s := range runs {
		e.idx.drop(worker, s.Path, s.Pages)
	}
}

// storeChain stores the chain gather collected from evs (stored events
// taken, with the removals applied before it) in one call. A chain that
// repeats a hash is refused whole (tree.ErrBlockCycle), where its events
// one by one would store the blocks before the repeat and then move the
// repeated block: so it is stored event by event then. False means the rest
// of the batch is to be ignored.
func (e *eventMirror) storeChain(worker string, rm *rankMirror, evs []workers.KVEvent, stored int) bool {
	first := &evs[0]
	attached, detached, err := rm.m.StoreFound(first.Parent, first.HasParent, rm.blocks, rm.found)
	if stored == 1 || !errors.Is(err, tree.ErrBlockCycle) {
		return e.stored(worker, rm, attached, detached, err)
	}
	for k := range evs {
		if ev := &evs[k]; ev.Kind == workers.KVStored {
			rm.blocks = toMirrorBlocks(rm.blocks[:0], ev.Blocks)
			if !e.store(worker, rm, ev.Parent, ev.HasParent, rm.blocks) {
				return false
			}
		}
	}
	return true
}

// store applies one chain; false means the rest of the batch is to be
// ignored.
func (e *eventMirror) store(worker string, rm *rankMirror, parent int64, hasParent bool, blocks []tree.MirrorBlock) bool {
	attached, detached, err := rm.m.Store(parent, hasParent, blocks)
	return e.stored(worker, rm, attached, detached, err)
}

// stored applies what a Store returned; false means the rest of the batch
// is to be ignored.
func (e *eventMirror) stored(worker string, rm *rankMirror, attached, detached []tree.PageRun, err error) bool {
	switch {
	case errors.Is(err, tree.ErrPageSize):
		// Matching pages of one size against an index of another would
		// be silently wrong; the worker falls back to the approximate mode.
		rm.m.Clear()
		e.idx.clear(worker)
		e.mu.Lock()
		e.refused[worker] = err.Error()
		delete(e.exact, worker)
		e.mu.Unlock()
		e.log.Error("KV events unusable: the worker stays on the approximate mode", "worker", worker, "err", err)
		return false
	case errors.Is(err, tree.ErrMirrorFull):
		// More blocks than the engine can hold: events were lost without a
		// gap in the numbers, or the engine lies. Start again.
		e.overflows.Add(1)
		n := rm.m.Len() + len(rm.blocks)
		rm.m.Clear()
		e.idx.clear(worker)
		e.drop(dropOverflow, n, "KV event mirror outgrew its bound and was reset", "worker", worker, "err", err)
		return true
	case err != nil:
		e.log.Warn("KV event not applied", "worker", worker, "err", err)
		return true
	}
	// A block re-stored with other content left first: drop before
	// confirming, or the old pages would stay confirmed.
	for _, s := range detached {
		e.idx.drop(worker, s.Path, s.Pages)
	}
	for _, s := range attached {
		e.idx.confirm(worker, s.Path)
	}
	return true
}

func toMirrorBlocks(dst []tree.MirrorBlock, bs []workers.KVBlock) []tree.MirrorBlock {
	for _, b := range bs {
		dst = append(dst, tree.MirrorBlock{Hash: b.Hash, Tokens: b.Tokens})
	}
	return dst
}

// learnedCapacity is worker's KV cache capacity in tokens as its events
// show it: the most blocks its engine held as it evicted, 0 until it has
// evicted. The cost and wait modes price what a prompt evicts from a full
// cache by the engine's capacity; an engine that reports none (TensorRT-LLM
// reports no KV size, and no engine has before its first load poll) looked
// as if it always had room, and a fleet of them sent every prompt to the
// engines holding its first page while the others stayed empty (on the
// Mooncake conversation trace over 128 such engines, a hit rate of 0.04
// where the engines' reported capacity gives 0.23). It takes the mirrors'
// map lock, never the tree's; selections call it only for candidates
// without a reported capacity, and it answers at once while no engine
// has evicted.
func (e *eventMirror) learnedCapacity(worker string) int {
	if !e.evicting.Load() {
		// A fleet without reported capacities whose engines have not
		// evicted: a map lookup under a lock per candidate added about
		// 25 µs to a selection among 1,000 workers.
		return 0
	}
	e.mu.Lock()
	rm := e.mirrors[mirrorKey{worker, wantRank(worker)}]
	e.mu.Unlock()
	if rm == nil {
		return 0
	}
	return int(rm.full.Load())
}

// ResetKVEvents forgets what worker's rank said: the index drops everything
// it holds for the worker, which the following batches rebuild.
func (e *eventMirror) ResetKVEvents(worker string, rank int) {
	if rank != wantRank(worker) {
		return // its events were never taken
	}
	rm, _ := e.rank(worker, rank)
	rm.mu.Lock()
	rm.m.Clear()
	e.idx.clear(worker)
	rm.mu.Unlock()
}

// SetKVEventMode records whether worker's events are the truth about its
// cache. A worker whose events turned out unusable stays approximate.
func (e *eventMirror) SetKVEventMode(worker string, exact bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if exact && e.refused[worker] == "" {
		e.exact[worker] = true
	} else {
		delete(e.exact, worker)
	}
}

// KVEventsUnusable says why worker's events are ignored (a block size other
// than the index's page size), or "" when they are not: ListWorkers then
// shows the worker as approximate whatever its stream's state.
func (e *eventMirror) KVEventsUnusable(worker string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.refused[worker]
}

// isExact reports whether worker's cache is known from its events.
func (e *eventMirror) isExact(worker string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.exact[worker]
}

// clearCache drops worker's mirrors (every rank) after its engine flushed
// its cache; the worker keeps its mode, as its subscription carries on.
func (e *eventMirror) clearCache(worker string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k := range e.mirrors {
		if k.worker == worker {
			delete(e.mirrors, k)
		}
	}
}

// forget drops everything kept about a worker that left the fleet.
func (e *eventMirror) forget(worker string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.exact, worker)
	delete(e.refused, worker)
	for k := range e.mirrors {
		if k.worker == worker {
			delete(e.mirrors, k)
		}
	}
}

// EventStats counts what the policy did with the engines' KV events.
type EventStats struct {
	// Applied counts events applied, by kind ("stored", "removed",
	// "cleared").
	Applied map[string]uint64
	// Unusable counts batches ignored because a worker's events cannot be
	// used (a page size other than the index's).
	Unusable uint64
	// Overflows counts worker mirrors reset for outgrowing their bound.
	Overflows uint64
	// Dropped counts the stored blocks a bound dropped, by reason: "rank"
	// (a batch of a data-parallel rank the fleet is not configured with),
	// "detached" (blocks that never attached, forgotten past the detached
	// bound), "overflow" (the blocks of a mirror reset past its bound).
	Dropped map[string]uint64
	// ExactWorkers is the number of workers whose cache is known from
	// their events.
	ExactWorkers int
}

// EventStats returns the counters so far.
func (e *eventMirror) EventStats() EventStats {
	s := EventStats{Applied: map[string]uint64{}, Unusable: e.unusable.Load(), Overflows: e.overflows.Load(),
		Dropped: map[string]uint64{}}
	for r := range dropReasons {
		s.Dropped[r.String()] = e.dropped[r].Load()
	}
	for _, k := range []workers.KVEventKind{workers.KVStored, workers.KVRemoved, workers.KVCleared} {
		s.Applied[k.String()] = e.applied[k].Load()
	}
	e.mu.Lock()
	s.ExactWorkers = len(e.exact)
	e.mu.Unlock()
	return s
}

package policy

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

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
// Data-parallel ranks are separate caches with separate event streams; the
// index has one tenant per worker, so it holds the union of the ranks'
// pages, and a rank's removal or reset removes the page for the worker even
// if another rank still holds it (an underprediction, never an
// overprediction).
type eventMirror struct {
	idx       cacheIndex
	pageSize  int
	maxBlocks int
	log       *slog.Logger

	mu      sync.Mutex
	mirrors map[mirrorKey]*rankMirror
	exact   map[string]bool   // workers whose events are the truth
	refused map[string]string // workers whose events cannot be used, and why

	applied   [4]atomic.Uint64 // events applied, by workers.KVEventKind
	unusable  atomic.Uint64    // batches ignored because the worker's events cannot be used
	overflows atomic.Uint64    // mirrors that outgrew maxBlocks and were reset
}

type mirrorKey struct {
	worker string
	rank   int
}

// rankMirror follows one rank of one worker.
type rankMirror struct {
	mu sync.Mutex
	m  *tree.Mirror

	// Scratch of ApplyKVEvents, under mu: the chain being gathered and
	// the removals to apply before it.
	blocks []tree.MirrorBlock
	gone   []int64
	// chain holds the hashes of blocks[:indexed], built only when a
	// removal names a hash the mirror does not know (see gather).
	chain   map[int64]struct{}
	indexed int
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

// defaultMirrorBlocks bounds one worker's mirror when its engine does not
// report its capacity: 4M pages (64M tokens at 16 per page), far beyond any
// single engine today. A mirror that outgrows its bound is reset.
const defaultMirrorBlocks = 1 << 22

func newEventMirror(idx cacheIndex, pageSize int, log *slog.Logger) *eventMirror {
	if log == nil {
		log = slog.Default()
	}
	return &eventMirror{idx: idx, pageSize: pageSize, maxBlocks: defaultMirrorBlocks, log: log,
		mirrors: map[mirrorKey]*rankMirror{}, exact: map[string]bool{}, refused: map[string]string{}}
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
	rm, refused := e.rank(worker, b.DPRank)
	if refused != "" {
		e.unusable.Add(1)
		return
	}
	rm.mu.Lock()
	defer rm.mu.Unlock()
	evs := b.Events
	for i := 0; i < len(evs); {
		ev := &evs[i]
		switch ev.Kind {
		case workers.KVStored:
			j, stored, hoisted := rm.gather(evs, i)
			if len(rm.gone) > 0 {
				e.remove(worker, rm, rm.gone)
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
			e.remove(worker, rm, ev.Hashes)
		case workers.KVCleared:
			rm.m.Clear()
			e.idx.clear(worker)
		}
		e.applied[ev.Kind&3].Add(1)
		i++
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
	rm.gone = rm.gone[:0]
	if rm.indexed > 0 {
		clear(rm.chain)
		rm.indexed = 0
	}
	fresh := true
	for _, b := range first.Blocks {
		fresh = fresh && !rm.m.Known(b.Hash)
	}
	continues := func(ev *workers.KVEvent) bool {
		return ev.Kind == workers.KVStored && ev.HasParent && len(rm.blocks) > 0 &&
			ev.Parent == rm.blocks[len(rm.blocks)-1].Hash
	}
	commutes := func(ev *workers.KVEvent) bool {
		if !fresh || ev.Kind != workers.KVRemoved {
			return false
		}
		n := len(rm.gone)
		for _, h := range ev.Hashes {
			ok := !(first.HasParent && h == first.Parent)
			if ok && rm.m.Known(h) {
				ok = rm.m.LeafAfter(h, rm.gone)
			} else if ok {
				ok = !rm.inChain(h)
			}
			if !ok {
				rm.gone = rm.gone[:n]
				return false
			}
			rm.gone = append(rm.gone, h)
		}
		return true
	}
	stored, next = 1, i+1
	for j := i + 1; j < len(evs); j++ {
		ev := &evs[j]
		switch {
		case continues(ev):
			for _, b := range ev.Blocks {
				fresh = fresh && !rm.m.Known(b.Hash)
			}
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

// remove applies the removal of hashes.
func (e *eventMirror) remove(worker string, rm *rankMirror, hashes []int64) {
	for _, s := range rm.m.Remove(hashes) {
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
	attached, detached, err := rm.m.Store(first.Parent, first.HasParent, rm.blocks)
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
func (e *eventMirror) stored(worker string, rm *rankMirror, attached, detached []tree.Span, err error) bool {
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
		rm.m.Clear()
		e.idx.clear(worker)
		e.log.Warn("KV event mirror outgrew its bound and was reset", "worker", worker, "err", err)
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

// ResetKVEvents forgets what worker's rank said: the index drops everything
// it holds for the worker, which the following batches rebuild.
func (e *eventMirror) ResetKVEvents(worker string, rank int) {
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
	// ExactWorkers is the number of workers whose cache is known from
	// their events.
	ExactWorkers int
}

// EventStats returns the counters so far.
func (e *eventMirror) EventStats() EventStats {
	s := EventStats{Applied: map[string]uint64{}, Unusable: e.unusable.Load(), Overflows: e.overflows.Load()}
	for _, k := range []workers.KVEventKind{workers.KVStored, workers.KVRemoved, workers.KVCleared} {
		s.Applied[k.String()] = e.applied[k].Load()
	}
	e.mu.Lock()
	s.ExactWorkers = len(e.exact)
	e.mu.Unlock()
	return s
}

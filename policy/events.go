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
			// Gather the run of stored events that continue this chain.
			blocks := toMirrorBlocks(nil, ev.Blocks)
			j := i + 1
			for ; j < len(evs) && evs[j].Kind == workers.KVStored && evs[j].HasParent &&
				len(blocks) > 0 && evs[j].Parent == blocks[len(blocks)-1].Hash; j++ {
				blocks = toMirrorBlocks(blocks, evs[j].Blocks)
			}
			e.applied[workers.KVStored].Add(uint64(j - i))
			if !e.store(worker, rm, ev.Parent, ev.HasParent, blocks) {
				return
			}
			i = j
			continue
		case workers.KVRemoved:
			for _, s := range rm.m.Remove(ev.Hashes) {
				e.idx.drop(worker, s.Path, s.Pages)
			}
		case workers.KVCleared:
			rm.m.Clear()
			e.idx.clear(worker)
		}
		e.applied[ev.Kind&3].Add(1)
		i++
	}
}

// store applies one chain; false means the rest of the batch is to be
// ignored.
func (e *eventMirror) store(worker string, rm *rankMirror, parent int64, hasParent bool, blocks []tree.MirrorBlock) bool {
	attached, detached, err := rm.m.Store(parent, hasParent, blocks)
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

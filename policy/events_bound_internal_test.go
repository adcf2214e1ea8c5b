package policy

import (
	"log/slog"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
)

// countIndex is a cacheIndex that counts what the mirror confirms.
type countIndex struct{ confirmed, dropped, cleared int }

func (c *countIndex) confirm(string, []uint32)   { c.confirmed++ }
func (c *countIndex) drop(string, []uint32, int) { c.dropped++ }
func (c *countIndex) clear(string)               { c.cleared++ }
func (e *eventMirror) blocksOf(worker string) (n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, rm := range e.mirrors {
		if k.worker == worker {
			n += rm.m.Len()
		}
	}
	return n
}

// orphans is a batch of rank's of n stored blocks, each under a parent
// hash never stored, starting at hash base: what a hostile engine sends.
func orphans(seq uint64, rank int, base int64, n, pageSize int) *workers.KVEventBatch {
	b := &workers.KVEventBatch{Seq: seq, DPRank: rank}
	for i := range int64(n) {
		b.Events = append(b.Events, workers.KVEvent{Kind: workers.KVStored, Parent: -(base + i), HasParent: true,
			Blocks: []workers.KVBlock{{Hash: base + i, Tokens: make([]uint32, pageSize)}}})
	}
	return b
}

// chainOf is a batch of one chain of n blocks off the root.
func chainOf(seq uint64, rank int, base int64, n, pageSize int) *workers.KVEventBatch {
	b := &workers.KVEventBatch{Seq: seq, DPRank: rank}
	for i := range int64(n) {
		ev := workers.KVEvent{Kind: workers.KVStored, Blocks: []workers.KVBlock{{Hash: base + i, Tokens: make([]uint32, pageSize)}}}
		if i > 0 {
			ev.Parent, ev.HasParent = base+i-1, true
		}
		b.Events = append(b.Events, ev)
	}
	return b
}

// TestEventMirrorBoundsAHostileEngine: what an engine writes into the
// router is bounded whatever it sends. Ranks are taken only as the fleet is
// configured (rank 0 for a worker, rank r for the rank target url@r); the
// blocks the engine never lets attach are capped; a mirror past its bound
// is reset. Each bound counts what it dropped and warns once, not once per
// batch.
func TestEventMirrorBoundsAHostileEngine(t *testing.T) {
	const (
		plain  = "grpc://10.0.0.1:30000"
		target = "grpc://10.0.0.2:30000@2"
		ps     = 4
	)
	logs := &testutil.Logs{Level: slog.LevelDebug}
	idx := &countIndex{}
	e := newEventMirror(idx, ps, logs.Logger())
	e.limit(1000, 100)

	// Ranks the fleet is not configured with: dropped, and no mirror made.
	for r := 1; r < 8; r++ {
		e.ApplyKVEvents(plain, orphans(0, r, 1000*int64(r), 10, ps))
		e.ResetKVEvents(plain, r)
	}
	e.ApplyKVEvents(target, orphans(0, 0, 1, 10, ps))
	e.ApplyKVEvents(target, chainOf(0, 2, 1, 3, ps)) // its own rank is taken
	if got := e.EventStats().Dropped["rank"]; got != 80 {
		t.Errorf("%d blocks dropped for their rank, want 80", got)
	}
	e.mu.Lock()
	mirrors := len(e.mirrors)
	e.mu.Unlock()
	if mirrors != 1 || e.blocksOf(target) != 3 || idx.confirmed != 1 {
		t.Errorf("%d mirrors, %d blocks for the rank target, %d confirmations; want 1, 3, 1", mirrors, e.blocksOf(target), idx.confirmed)
	}

	// A flood of blocks that never attach: capped at the detached bound.
	for i := range int64(100) {
		e.ApplyKVEvents(plain, orphans(uint64(i), 0, 1_000_000+100*i, 100, ps))
		if n := e.blocksOf(plain); n > 100 {
			t.Fatalf("after %d orphans the mirror holds %d blocks, bound 100", 100*(i+1), n)
		}
	}
	if got := e.EventStats().Dropped["detached"]; got != 10_000-100 {
		t.Errorf("%d detached blocks forgotten, want 9900", got)
	}

	// Attached blocks past the mirror's bound: it is reset.
	e.ApplyKVEvents(plain, chainOf(100, 0, 1, 999, ps))
	if st := e.EventStats(); st.Overflows != 1 || st.Dropped["overflow"] == 0 || e.blocksOf(plain) > 1000 {
		t.Errorf("overflows %d, %d blocks dropped for it, %d held", st.Overflows, st.Dropped["overflow"], e.blocksOf(plain))
	}

	// One WARN line per bound, however often it bit.
	warned := map[string]int{}
	for _, r := range logs.Records(slog.LevelWarn) {
		warned[r.Message]++
	}
	if len(warned) != 3 {
		t.Errorf("WARN lines %v, want one for each of the 3 bounds", warned)
	}
	for msg, n := range warned {
		if n != 1 {
			t.Errorf("%d WARN lines %q", n, msg)
		}
	}
}

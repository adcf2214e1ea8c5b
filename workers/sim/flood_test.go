package sim

import (
	"context"
	"testing"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/internal/testutil"
)

// TestKvEventFlood: with the flood faults, each batch the engine publishes
// stores the flood's blocks under parents never stored, on rank 0 and, as
// batches of their own numbered per rank, on ranks the engine does not have.
func TestKvEventFlood(t *testing.T) {
	e, err := New(testConfig(ProtocolSGLang))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.SetFaults(Faults{KVEventFloodBlocks: 5, KVEventFloodRanks: 3})
	got := make(chan *smgcommon.KvEventBatch, 64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = e.subscribeKvEvents(ctx, 0, func(b *smgcommon.KvEventBatch) error { got <- b; return nil })
	}()
	testutil.Eventually(t, "the subscription", func() bool { return e.Stats().KVSubscribers == 1 })
	for i := range 2 {
		e.mu.Lock()
		e.cache.insert(prompt(100*i, 16)) // one page of the engine's own
		e.publishLocked()
		e.mu.Unlock()
	}
	stored := map[int64]bool{}
	parents := map[int64]bool{}
	next := map[int32]uint64{}
	for range 6 { // two publications, each on ranks 0, 1 and 2
		b := <-got
		r := b.GetDpRank()
		if b.GetSequenceNumber() != next[r] {
			t.Fatalf("rank %d: batch %d, want %d", r, b.GetSequenceNumber(), next[r])
		}
		next[r]++
		flood := 0
		for _, ev := range b.GetEvents() {
			s := ev.GetStored()
			if s == nil {
				continue
			}
			for _, bl := range s.GetBlocks() {
				stored[bl.GetBlockHash()] = true
				if len(bl.GetTokenIds()) != e.cfg.PageSize {
					t.Fatalf("a flood block of %d tokens", len(bl.GetTokenIds()))
				}
			}
			if s.ParentBlockHash != nil {
				parents[s.GetParentBlockHash()] = true
				flood++
			}
		}
		if flood != 5 {
			t.Errorf("rank %d batch %d: %d blocks under a parent, want the flood's 5", r, b.GetSequenceNumber(), flood)
		}
	}
	for p := range parents {
		if stored[p] {
			t.Errorf("a flood block's parent %d was stored", p)
		}
	}
	if len(next) != 3 {
		t.Errorf("batches on ranks %v, want 0, 1 and 2", next)
	}
}

package sim

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
)

func TestKvEvents(t *testing.T) {
	// Four pages of 16 tokens, so the third prompt forces an eviction.
	forEachProtocol(t, func(c *Config) { c.KVCapacityTokens = 64 }, func(t *testing.T, srv *Server, c client) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		recv, err := c.subscribe(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the subscription", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })
		next := func(wantSeq uint64) []*smgcommon.KvCacheEvent {
			t.Helper()
			b, err := recv()
			if err != nil {
				t.Fatalf("recv batch %d: %v", wantSeq, err)
			}
			if b.GetSequenceNumber() != wantSeq || b.GetTimestamp() <= 0 {
				t.Fatalf("batch seq %d ts %v, want seq %d", b.GetSequenceNumber(), b.GetTimestamp(), wantSeq)
			}
			return b.GetEvents()
		}

		// A 40-token prompt stores its two whole pages as one root chain.
		// (max_new_tokens 1: no output token has KV, so nothing more is cached.)
		a := prompt(1000, 40)
		mustComplete(t, c, genParams{prompt: a, maxNew: u32(1)})
		evs := next(1)
		if len(evs) != 1 || evs[0].GetStored() == nil {
			t.Fatalf("batch 1: %v", evs)
		}
		st := evs[0].GetStored()
		if st.ParentBlockHash != nil || len(st.GetBlocks()) != 2 {
			t.Fatalf("stored: %v, want a 2-block root chain", st)
		}
		for i, blk := range st.GetBlocks() {
			if !slices.Equal(blk.GetTokenIds(), a[16*i:16*(i+1)]) || blk.GetBlockSize() != 16 {
				t.Fatalf("block %d: %v", i, blk)
			}
		}
		a0, a1 := st.GetBlocks()[0].GetBlockHash(), st.GetBlocks()[1].GetBlockHash()

		// Sharing the first page: one new block, hanging off it.
		b := append(slices.Clone(a[:16]), prompt(5000, 16)...)
		if r := mustComplete(t, c, genParams{prompt: b, maxNew: u32(1)}); r.final.cached != 16 {
			t.Fatalf("shared page: cached %d, want 16", r.final.cached)
		}
		evs = next(2)
		st = evs[0].GetStored()
		if len(evs) != 1 || st.GetParentBlockHash() != a0 || len(st.GetBlocks()) != 1 {
			t.Fatalf("batch 2: %v, want one block with parent %d", evs, a0)
		}

		// Two more pages with one free: a's second page (the LRU leaf) goes.
		mustComplete(t, c, genParams{prompt: prompt(9000, 32), maxNew: u32(1)})
		evs = next(3)
		if len(evs) != 2 || !slices.Equal(evs[0].GetRemoved().GetBlockHashes(), []int64{a1}) || len(evs[1].GetStored().GetBlocks()) != 2 {
			t.Fatalf("batch 3: %v, want block %d removed then 2 stored", evs, a1)
		}
		if evs[1].GetEventId() <= evs[0].GetEventId() {
			t.Fatalf("event ids not increasing: %v", evs)
		}

		// Resuming from sequence 2 replays batches 2 and 3.
		again, err := c.subscribe(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		for want := uint64(2); want <= 3; want++ {
			if b, err := again(); err != nil || b.GetSequenceNumber() != want {
				t.Fatalf("replay: batch %v, %v, want seq %d", b.GetSequenceNumber(), err, want)
			}
		}

		// The stream ends with UNAVAILABLE when the engine goes away.
		srv.Stop()
		if _, err := recv(); status.Code(err) != codes.Unavailable {
			t.Fatalf("after Stop: %v, want UNAVAILABLE", err)
		}
	})
}

func TestSlowKvSubscriberIsDropped(t *testing.T) {
	e, err := New(testConfig(ProtocolSGLang))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	release := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- e.subscribeKvEvents(context.Background(), 0, func(*smgcommon.KvEventBatch) error {
			<-release
			return nil
		})
	}()
	waitFor(t, "the subscription", func() bool { return e.Stats().KVSubscribers == 1 })
	for i := range kvSubscriberBuffer + 2 {
		e.mu.Lock()
		e.cache.insert(prompt(100*i, 16))
		e.publishLocked() // must not block on the stuck subscriber
		e.mu.Unlock()
	}
	close(release)
	select {
	case err := <-errc:
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("slow subscriber ended with %v, want RESOURCE_EXHAUSTED", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("slow subscriber was not dropped")
	}
	if n := e.Stats().KVSubscribers; n != 0 {
		t.Fatalf("%d subscribers left", n)
	}
}

func TestEngineCloseEndsGenerate(t *testing.T) {
	forEachProtocol(t, func(c *Config) { c.Faults.StallAfterTokens = 1 }, func(t *testing.T, srv *Server, c client) {
		recv := stalled(t, context.Background(), c, "x", 1)
		srv.Engine().Close()
		if r := collect(recv); status.Code(r.err) != codes.Unavailable {
			t.Fatalf("after Close: %v, want UNAVAILABLE", r.err)
		}
		if r := generate(t, c, genParams{prompt: prompt(1, 4), maxNew: u32(1)}); status.Code(r.err) != codes.Unavailable {
			t.Fatalf("Generate after Close: %v, want UNAVAILABLE", r.err)
		}
		if st := srv.Engine().Stats(); st.Running != 0 || st.PinnedPages != 0 {
			t.Fatalf("after Close: %+v", st)
		}
	})
}

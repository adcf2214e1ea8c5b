package sim

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/internal/testutil"
)

// oneBatch runs a request that makes the engine publish exactly one KV event
// batch: a one-page prompt nothing else shares (n tells them apart), whose
// page is stored at admission; max_new_tokens 1 leaves no output token with
// KV, so nothing more is stored at completion.
func oneBatch(t *testing.T, c client, n int) {
	t.Helper()
	mustComplete(t, c, genParams{prompt: prompt(100000+1000*n, 16), maxNew: u32(1)})
}

// recvUntil reads batches until the one numbered last, and returns the
// sequence numbers read, in order.
func recvUntil(t *testing.T, recv func() (*smgcommon.KvEventBatch, error), last uint64) []uint64 {
	t.Helper()
	var seqs []uint64
	for {
		b, err := recv()
		if err != nil {
			t.Fatalf("after batches %v: %v", seqs, err)
		}
		seqs = append(seqs, b.GetSequenceNumber())
		if b.GetSequenceNumber() == last {
			return seqs
		}
	}
}

// seqRange is lo, lo+1, ..., hi.
func seqRange(lo, hi uint64) []uint64 {
	var out []uint64
	for s := lo; s <= hi; s++ {
		out = append(out, s)
	}
	return out
}

// TestKvEvents pins what the stream says: batches numbered from 0, one
// stored event per page chained to the page before it, removals where
// evictions happen, and the end of the stream when the engine goes away.
func TestKvEvents(t *testing.T) {
	// Four pages of 16 tokens, so the third prompt forces an eviction.
	forEachProtocol(t, func(c *Config) { c.KVCapacityTokens = 64 }, func(t *testing.T, srv *Process, c client) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		recv, err := c.subscribe(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the subscription", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })
		next := func(wantSeq uint64, wantEvents int) []*smgcommon.KvCacheEvent {
			t.Helper()
			b, err := recv()
			if err != nil {
				t.Fatalf("recv batch %d: %v", wantSeq, err)
			}
			if b.GetSequenceNumber() != wantSeq || b.GetTimestamp() <= 0 || len(b.GetEvents()) != wantEvents {
				t.Fatalf("batch seq %d ts %v with %d events, want seq %d with %d events: %v",
					b.GetSequenceNumber(), b.GetTimestamp(), len(b.GetEvents()), wantSeq, wantEvents, b.GetEvents())
			}
			for i := 1; i < len(b.GetEvents()); i++ {
				if b.GetEvents()[i].GetEventId() <= b.GetEvents()[i-1].GetEventId() {
					t.Fatalf("batch %d: event ids not increasing: %v", wantSeq, b.GetEvents())
				}
			}
			return b.GetEvents()
		}
		// stored checks that ev stores exactly one page, tokens, hanging off
		// parent (nil: the root), and returns the page's hash.
		stored := func(ev *smgcommon.KvCacheEvent, tokens []uint32, parent *int64) int64 {
			t.Helper()
			st := ev.GetStored()
			if st == nil || len(st.GetBlocks()) != 1 {
				t.Fatalf("event %v, want one stored block", ev)
			}
			blk := st.GetBlocks()[0]
			if !slices.Equal(blk.GetTokenIds(), tokens) || blk.GetBlockSize() != 16 {
				t.Fatalf("stored block %v, want tokens %v and block_size 16", blk, tokens)
			}
			switch {
			case parent == nil && st.ParentBlockHash != nil:
				t.Fatalf("stored block off the root has parent %d", st.GetParentBlockHash())
			case parent != nil && (st.ParentBlockHash == nil || st.GetParentBlockHash() != *parent):
				t.Fatalf("stored block has parent %v, want %d", st.ParentBlockHash, *parent)
			}
			return blk.GetBlockHash()
		}

		// A 40-token prompt: its two whole pages are two events, the second
		// hanging off the first; the partial third page is not cached.
		a := prompt(1000, 40)
		mustComplete(t, c, genParams{prompt: a, maxNew: u32(1)})
		evs := next(0, 2)
		a0 := stored(evs[0], a[:16], nil)
		a1 := stored(evs[1], a[16:32], &a0)

		// Sharing the first page: one new page, hanging off it.
		b := append(slices.Clone(a[:16]), prompt(5000, 16)...)
		if r := mustComplete(t, c, genParams{prompt: b, maxNew: u32(1)}); r.final.cached != 16 {
			t.Fatalf("shared page: cached %d, want 16", r.final.cached)
		}
		stored(next(1, 1)[0], b[16:], &a0)

		// Two more pages with one free: the first fits, the second evicts a's
		// second page (the LRU leaf), in that order.
		x := prompt(9000, 32)
		mustComplete(t, c, genParams{prompt: x, maxNew: u32(1)})
		evs = next(2, 3)
		x0 := stored(evs[0], x[:16], nil)
		if got := evs[1].GetRemoved().GetBlockHashes(); !slices.Equal(got, []int64{a1}) {
			t.Fatalf("event %v, want block %d removed", evs[1], a1)
		}
		stored(evs[2], x[16:], &x0)
		if n := srv.Engine().Stats().KVNextSequence; n != 3 {
			t.Fatalf("Stats.KVNextSequence %d after three batches, want 3", n)
		}

		// The stream ends with UNAVAILABLE when the engine goes away.
		srv.Stop()
		if _, err := recv(); status.Code(err) != codes.Unavailable {
			t.Fatalf("after Stop: %v, want UNAVAILABLE", err)
		}
	})
}

// TestKvEventsRestart: numbering starts at 0 in every engine process, so a
// restart shows as numbers going backwards; a subscriber that resumes from
// the number it expected next gets the new process's batches from now on;
// and block hashes are the process's own: the same page has another hash
// after a restart, and in another engine with the same configuration.
func TestKvEventsRestart(t *testing.T) {
	forEachProtocol(t, nil, func(t *testing.T, srv *Process, c client) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		proto := srv.Engine().Config().Protocol
		page := prompt(1, 16)
		// hashOf runs page through c and returns its hash from the batch
		// numbered wantSeq, which recv must deliver next.
		hashOf := func(c client, recv func() (*smgcommon.KvEventBatch, error), wantSeq uint64) int64 {
			t.Helper()
			mustComplete(t, c, genParams{prompt: page, maxNew: u32(1)})
			b, err := recv()
			if err != nil || b.GetSequenceNumber() != wantSeq || len(b.GetEvents()) != 1 {
				t.Fatalf("batch %v, %v: want seq %d with one event", b, err, wantSeq)
			}
			blk := b.GetEvents()[0].GetStored().GetBlocks()[0]
			if !slices.Equal(blk.GetTokenIds(), page) {
				t.Fatalf("stored %v, want the page %v", blk.GetTokenIds(), page)
			}
			return blk.GetBlockHash()
		}

		recv, err := c.subscribe(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the subscription", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })
		before := hashOf(c, recv, 0)
		oneBatch(t, c, 1)
		oneBatch(t, c, 2)
		if got := recvUntil(t, recv, 2); !slices.Equal(got, []uint64{1, 2}) {
			t.Fatalf("batches %v, want 1 and 2", got)
		}

		srv.Kill()
		if _, err := recv(); status.Code(err) != codes.Unavailable {
			t.Fatalf("subscription after Kill: %v, want UNAVAILABLE", err)
		}
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		c2 := newClient(t, srv, proto)
		recv2, err := c2.subscribe(ctx, 3) // the number it expected next
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the resubscription", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })
		if after := hashOf(c2, recv2, 0); after == before {
			t.Fatalf("page hash %d before and after the restart", before)
		}

		other, oc := startSim(t, srv.Engine().Config())
		recv3, err := oc.subscribe(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the other engine's subscription", func() bool { return other.Engine().Stats().KVSubscribers == 1 })
		if h := hashOf(oc, recv3, 0); h == before {
			t.Fatalf("two engines both name the page %d", h)
		}
	})
}

// TestKvEventReplay: what a subscription gets for each start_sequence_number,
// with batches 0..4 published and the last three of them kept.
func TestKvEventReplay(t *testing.T) {
	const published = 5 // batches 0..4 before subscribing; the next is 5
	tests := []struct {
		name    string
		history int
		start   uint64
		want    []uint64 // batches received up to the one published after subscribing
		wantErr codes.Code
	}{
		{name: "start 0 is from now on, no replay", history: 3, start: 0, want: []uint64{5}},
		{name: "start within the history replays from it, then goes live", history: 3, start: 2, want: []uint64{2, 3, 4, 5}},
		{name: "start at the newest batch kept", history: 3, start: 4, want: []uint64{4, 5}},
		{name: "start at the next number has nothing to replay", history: 3, start: 5, want: []uint64{5}},
		{name: "start beyond the next number (a restarted engine) is from now on", history: 3, start: 9, want: []uint64{5}},
		{name: "start older than the history is OUT_OF_RANGE", history: 3, start: 1, wantErr: codes.OutOfRange},
		{name: "without history only the next number resumes", history: 0, start: 5, want: []uint64{5}},
		{name: "without history any earlier start is OUT_OF_RANGE", history: 0, start: 4, wantErr: codes.OutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachProtocol(t, func(c *Config) { c.KVEventHistory = tt.history }, func(t *testing.T, srv *Process, c client) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				for i := range published {
					oneBatch(t, c, i)
				}
				recv, err := c.subscribe(ctx, tt.start)
				if err != nil {
					t.Fatal(err)
				}
				if tt.wantErr != codes.OK {
					_, err := recv()
					oldest := uint64(published - tt.history)
					if status.Code(err) != tt.wantErr || !strings.Contains(err.Error(), fmt.Sprintf("batch %d ", tt.start)) ||
						!strings.Contains(err.Error(), fmt.Sprintf("oldest available is %d ", oldest)) {
						t.Fatalf("subscribe from %d: %v, want %v naming %d and the oldest available, %d", tt.start, err, tt.wantErr, tt.start, oldest)
					}
					return
				}
				testutil.Eventually(t, "the subscription", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })
				oneBatch(t, c, published)
				if got := recvUntil(t, recv, published); !slices.Equal(got, tt.want) {
					t.Fatalf("subscribe from %d: batches %v, want %v", tt.start, got, tt.want)
				}
			})
		})
	}
}

// TestKvEventReplayJoinsLive subscribes with a replay while the engine keeps
// publishing: replay and live batches must join with nothing lost or sent
// twice.
func TestKvEventReplayJoinsLive(t *testing.T) {
	const before, during, start = 32, 300, 16
	cfg := testConfig(ProtocolSGLang)
	cfg.KVEventHistory = before + during // start stays in the history however far publishing gets
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	publish := func(i int) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.cache.insert(prompt(100*i, 16))
		e.publishLocked()
	}
	for i := range before {
		publish(i)
	}
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := before; i < before+during; i++ {
			publish(i)
			runtime.Gosched() // let the subscription in between publishes
		}
	}()
	defer func() { <-published }()
	testutil.Eventually(t, "publishing to be under way", func() bool { return e.Stats().KVNextSequence > before })
	last := uint64(before + during - 1)
	var got []uint64
	errDone := errors.New("done")
	err = e.subscribeKvEvents(context.Background(), start, func(b *smgcommon.KvEventBatch) error {
		got = append(got, b.GetSequenceNumber())
		if b.GetSequenceNumber() == last {
			return errDone
		}
		return nil
	})
	if !errors.Is(err, errDone) {
		t.Fatalf("subscription ended with %v after %d batches", err, len(got))
	}
	if want := seqRange(start, last); !slices.Equal(got, want) {
		t.Fatalf("got %d batches %v..., want %d from %d to %d without gaps or repeats", len(got), got[:min(len(got), 10)], len(want), start, last)
	}
}

// TestKvEventsOff: an engine started with --kv-events off answers
// SubscribeKvEvents with UNIMPLEMENTED on both protocols, saying why.
func TestKvEventsOff(t *testing.T) {
	forEachProtocol(t, func(c *Config) { c.KVEvents = false }, func(t *testing.T, srv *Process, c client) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		mustComplete(t, c, genParams{prompt: prompt(1, 40), maxNew: u32(4)})
		recv, err := c.subscribe(ctx, 0)
		if err == nil {
			_, err = recv()
		}
		if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "--kv-events off") {
			t.Fatalf("SubscribeKvEvents: %v, want UNIMPLEMENTED naming --kv-events off", err)
		}
		if st := srv.Engine().Stats(); st.KVSubscribers != 0 || st.KVNextSequence != 0 {
			t.Fatalf("with events off: %d subscribers, next sequence %d", st.KVSubscribers, st.KVNextSequence)
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
	testutil.Eventually(t, "the subscription", func() bool { return e.Stats().KVSubscribers == 1 })
	for i := range kvSubscriberBuffer + 2 {
		e.mu.Lock()
		e.cache.insert(prompt(100*i, 16))
		e.publishLocked() // must not block on the stuck subscriber
		e.mu.Unlock()
	}
	close(release)
	if err := testutil.Receive(t, errc, "the slow subscriber to be dropped"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("slow subscriber ended with %v, want RESOURCE_EXHAUSTED", err)
	}
	if n := e.Stats().KVSubscribers; n != 0 {
		t.Fatalf("%d subscribers left", n)
	}
}

func TestEngineCloseEndsGenerate(t *testing.T) {
	forEachProtocol(t, func(c *Config) { c.Faults.StallAfterTokens = 1 }, func(t *testing.T, srv *Process, c client) {
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

package workers_test

// KV event subscriptions end to end: real gRPC over loopback to the
// simulated engine, both protocols. These tests hold whatever number the
// engine counts from and however many blocks it puts in one stored event;
// they check what must be true either way.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// runKVSubscriptions runs subscriptions over reg with quick backoffs until
// the test ends or stop is called, and checks that Run returns when told.
func runKVSubscriptions(t *testing.T, reg *workers.Registry, rec *kvRecorder, tweak ...func(*workers.KVSubscriptionConfig)) (subs *workers.KVSubscriptions, stop func()) {
	t.Helper()
	cfg := workers.DefaultKVSubscriptionConfig(rec)
	cfg.InitialBackoff = 10 * time.Millisecond
	cfg.MaxBackoff = 5 * time.Second
	for _, f := range tweak {
		f(&cfg)
	}
	var err error
	subs, err = workers.NewKVSubscriptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- subs.Run(ctx, reg) }()
	stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
	t.Cleanup(stop)
	return subs, stop
}

// generate runs one request to completion on w.
func generate(t *testing.T, w *workers.Worker, id string, prompt []uint32) {
	t.Helper()
	s, err := w.Backend().Generate(testutil.Context(t, 5*time.Second), &workers.GenerateRequest{RequestID: id, InputIDs: prompt,
		Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](2), IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	drain(t, s)
}

// storedPages is every stored block's tokens applied for url, as strings.
func storedPages(rec *kvRecorder, url string) map[string]bool {
	pages := map[string]bool{}
	for _, b := range rec.applied(url) {
		for _, e := range b.Events {
			for _, bl := range e.Blocks {
				pages[fmt.Sprint(bl.Tokens)] = true
			}
		}
	}
	return pages
}

// hasPages reports whether every whole page of prompt was applied as stored.
func hasPages(rec *kvRecorder, url string, prompt []uint32, page int) bool {
	stored := storedPages(rec, url)
	for i := 0; i+page <= len(prompt); i += page {
		if !stored[fmt.Sprint(prompt[i:i+page])] {
			return false
		}
	}
	return true
}

func mode(subs *workers.KVSubscriptions, url string) workers.KVEventMode {
	st, _ := subs.Status(url)
	return st.Mode
}

// TestKVEventsFromSim: the engine's batches reach the handler in order, the
// stored blocks are the prompt's pages chained from the root, removals name
// blocks stored before, and the worker is in events mode.
func TestKVEventsFromSim(t *testing.T) {
	for _, p := range allSimProtocols {
		t.Run(p.name, func(t *testing.T) {
			srv, w := simtest.Worker(t, simtest.Config(p.name)) // 16-token pages, 8192 tokens of KV
			reg := workers.NewRegistry()
			_ = reg.Add(w)
			rec := newKVRecorder()
			subs, _ := runKVSubscriptions(t, reg, rec)
			testutil.Eventually(t, "the engine to see the subscriber", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })

			first := testutil.Tokens(1000, 64)
			generate(t, w, "a", first)
			testutil.Eventually(t, "the prompt's pages as stored events", func() bool { return hasPages(rec, w.URL(), first, 16) })
			// The handler gets a batch before the subscription counts the
			// stream as working, so the mode may trail the pages.
			testutil.Eventually(t, "the mode to say events", func() bool { return mode(subs, w.URL()) == workers.KVModeEvents })

			// Fill the cache past its capacity so that the engine evicts.
			for i := range 10 {
				generate(t, w, fmt.Sprint("fill", i), testutil.Tokens(uint32(20000+2000*i), 1024))
			}
			testutil.Eventually(t, "removals", func() bool { st, _ := subs.Status(w.URL()); return st.Removed > 0 })
			// The engine is idle now; let the status catch up with the handler.
			var batches []*workers.KVEventBatch
			var st workers.KVEventStatus
			testutil.Eventually(t, "the status to count every batch", func() bool {
				st, _ = subs.Status(w.URL())
				batches = rec.applied(w.URL())
				return st.Batches == uint64(len(batches))
			})
			known := map[int64]bool{}
			for i, b := range batches {
				if i > 0 && b.Seq != batches[i-1].Seq+1 {
					t.Fatalf("batch %d has sequence number %d after %d", i, b.Seq, batches[i-1].Seq)
				}
				if b.DPRank != 0 || b.Timestamp.IsZero() {
					t.Errorf("batch %d: rank %d, timestamp %v", b.Seq, b.DPRank, b.Timestamp)
				}
				for _, e := range b.Events {
					switch e.Kind {
					case workers.KVStored:
						if e.HasParent && !known[e.Parent] {
							t.Errorf("batch %d stores under parent %d, never stored", b.Seq, e.Parent)
						}
						for _, bl := range e.Blocks {
							if len(bl.Tokens) != 16 || bl.BlockSize != 16 {
								t.Errorf("batch %d: block of %d tokens, size %d; want 16", b.Seq, len(bl.Tokens), bl.BlockSize)
							}
							known[bl.Hash] = true
						}
					case workers.KVRemoved:
						for _, h := range e.Hashes {
							if !known[h] {
								t.Errorf("batch %d removes block %d, never stored", b.Seq, h)
							}
							delete(known, h)
						}
					}
				}
			}
			if got := rec.log(w.URL()); slices.Contains(got, "reset 0") || slices.Contains(got, "approximate") {
				t.Errorf("a healthy stream reset or went approximate: %q", got)
			}
			if !st.Connected || !st.HasLastSeq || st.LastSeq != batches[len(batches)-1].Seq || st.Stored == 0 || st.Gaps+st.Resets+st.Resyncs+st.Duplicates+st.Failures != 0 {
				t.Errorf("status %+v after %d batches", st, len(batches))
			}
		})
	}
}

// TestKVEventsHybridModelKeepsThePrefixGroup: a hybrid model's engine
// publishes a full-attention group and a sliding-window group under the
// same block hashes; the sliding-window group frees each block as the next
// one enters its window. Only the full-attention group's blocks are a prefix
// a later prompt reuses whole, so only its events reach the handler: each
// page stored once, and nothing removed while the cache has room.
func TestKVEventsHybridModelKeepsThePrefixGroup(t *testing.T) {
	for _, p := range simProtocols {
		t.Run(p.name, func(t *testing.T) {
			cfg := simtest.Config(p.name)
			cfg.HybridSlidingWindow = 32
			srv, w := simtest.Worker(t, cfg)
			reg := workers.NewRegistry()
			_ = reg.Add(w)
			rec := newKVRecorder()
			subs, _ := runKVSubscriptions(t, reg, rec)
			testutil.Eventually(t, "the engine to see the subscriber", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })

			prompt := testutil.Tokens(1000, 64)
			generate(t, w, "a", prompt)
			generate(t, w, "b", append(slices.Clone(prompt), testutil.Tokens(5000, 32)...))
			testutil.Eventually(t, "the prompt's pages as stored events", func() bool { return hasPages(rec, w.URL(), prompt, 16) })
			var batches []*workers.KVEventBatch
			testutil.Eventually(t, "the status to count every batch", func() bool {
				st, _ := subs.Status(w.URL())
				batches = rec.applied(w.URL())
				return st.Batches == uint64(len(batches)) && st.Batches >= 2
			})
			stored := map[string]int{}
			for _, b := range batches {
				for _, e := range b.Events {
					if e.Kind == workers.KVRemoved {
						t.Errorf("batch %d removes %v: the sliding-window group's removals reached the prefix index", b.Seq, e.Hashes)
					}
					for _, bl := range e.Blocks {
						stored[fmt.Sprint(bl.Tokens)]++
					}
				}
			}
			for page, n := range stored {
				if n != 1 {
					t.Errorf("page %s stored %d times, want once (the full-attention group's)", page, n)
				}
			}
		})
	}
}

// TestKVEventsEngineRestart: an engine killed and restarted at the same
// address numbers its batches afresh; the subscription resumes, sees the
// numbers go backwards, resets the worker's mirror and carries on in events
// mode with the new engine's batches.
func TestKVEventsEngineRestart(t *testing.T) {
	for _, p := range allSimProtocols {
		t.Run(p.name, func(t *testing.T) {
			srv, w := simtest.Worker(t, simtest.Config(p.name))
			reg := workers.NewRegistry()
			_ = reg.Add(w)
			rec := newKVRecorder()
			subs, _ := runKVSubscriptions(t, reg, rec)
			testutil.Eventually(t, "the engine to see the subscriber", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })
			before, before2 := testutil.Tokens(3000, 48), testutil.Tokens(5000, 48)
			generate(t, w, "before", before)
			generate(t, w, "before-2", before2)
			testutil.Eventually(t, "events before the restart", func() bool {
				return hasPages(rec, w.URL(), before, 16) && hasPages(rec, w.URL(), before2, 16)
			})
			applied := len(rec.applied(w.URL()))

			srv.Kill()
			testutil.Eventually(t, "the stream to break", func() bool { st, _ := subs.Status(w.URL()); return st.Failures > 0 })
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			// Resubscribed to the new engine before it publishes anything, so
			// that its first batch is numbered below what the old one reached.
			testutil.Eventually(t, "the restarted engine to see the subscriber", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })
			after := testutil.Tokens(7000, 48)
			generate(t, w, "after", after)
			testutil.Eventually(t, "events after the restart", func() bool { return hasPages(rec, w.URL(), after, 16) })

			st, _ := subs.Status(w.URL())
			if st.Resets != 1 || st.Gaps != 0 || st.Mode != workers.KVModeEvents {
				t.Errorf("status after the restart: %+v", st)
			}
			log := rec.log(w.URL())
			reset := slices.Index(log, "reset 0")
			if reset < 0 || slices.Index(log[reset:], "approximate") >= 0 {
				t.Fatalf("handler calls %q: want a reset, and no approximate mode after it", log)
			}
			// After the reset, the new engine's batches only.
			newBatches := rec.applied(w.URL())[applied:]
			if len(newBatches) == 0 || newBatches[0].Seq >= rec.applied(w.URL())[applied-1].Seq {
				t.Errorf("first batch after the restart numbered %d, the last before %d", newBatches[0].Seq, rec.applied(w.URL())[applied-1].Seq)
			}
		})
	}
}

// TestKVEventsWorkerRemoved: removing a worker closes its stream on the
// engine, ends its goroutines, and no event reaches the handler after.
func TestKVEventsWorkerRemoved(t *testing.T) {
	srv, w := simtest.Worker(t, simtest.Config(sim.ProtocolVLLM))
	reg := workers.NewRegistry()
	_ = reg.Add(w)
	rec := newKVRecorder()
	subs, _ := runKVSubscriptions(t, reg, rec)
	testutil.Eventually(t, "the engine to see the subscriber", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })
	if kvGoroutines(t, w.URL()) == 0 {
		t.Fatal("no goroutine labelled with the worker's subscription")
	}

	if _, err := reg.Remove(w.URL()); err != nil {
		t.Fatal(err)
	}
	calls := len(rec.log(w.URL()))
	testutil.Eventually(t, "the engine to see the stream closed", func() bool { return srv.Engine().Stats().KVSubscribers == 0 })
	testutil.Eventually(t, "the subscription's goroutines to end", func() bool { return kvGoroutines(t, w.URL()) == 0 })
	generate(t, w, "after-removal", testutil.Tokens(100, 64))
	handledSoFar(t, reg, subs)
	if n := srv.Engine().Stats().KVSubscribers; n != 0 {
		t.Fatalf("the removed worker's engine has %d subscribers again", n)
	}
	if got := rec.log(w.URL()); len(got) != calls {
		t.Errorf("handler calls after removal: %q", got[calls:])
	}
	if _, ok := subs.Status(w.URL()); ok {
		t.Error("a removed worker still has a status")
	}
}

// handledSoFar returns once subs has handled every change of reg made
// before the call: it registers a witness worker (an engine of its own) and
// waits for the witness's subscription, which the subscriptions start only
// from a registry view that holds every earlier change. A test that asserts
// what did not happen (no subscription, no event) asserts it after this,
// instead of after a pause.
func handledSoFar(t *testing.T, reg *workers.Registry, subs *workers.KVSubscriptions) {
	t.Helper()
	_, witness := simtest.Worker(t, simtest.Config(sim.ProtocolSGLang))
	if err := reg.Add(witness); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the witness worker's subscription", func() bool {
		_, ok := subs.Status(witness.URL())
		return ok
	})
}

// TestKVEventsRunEnds: cancelling Run's context closes every stream and
// ends every subscription goroutine.
func TestKVEventsRunEnds(t *testing.T) {
	reg := workers.NewRegistry()
	var srvs []*sim.Process
	for _, p := range allSimProtocols {
		srv, w := simtest.Worker(t, simtest.Config(p.name))
		_ = reg.Add(w)
		srvs = append(srvs, srv)
	}
	_, stop := runKVSubscriptions(t, reg, newKVRecorder())
	for _, srv := range srvs {
		testutil.Eventually(t, "the engines to see their subscribers", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })
	}

	stop()
	// Run waits for its own goroutines (the synctest scenarios hold it to
	// that exactly); gRPC's goroutine watching each call ends a moment
	// after the call, and carries the label too.
	for _, w := range reg.Snapshot() {
		testutil.Eventually(t, "the subscription's goroutines to end", func() bool { return kvGoroutines(t, w.URL()) == 0 })
	}
	for _, srv := range srvs {
		testutil.Eventually(t, "the engines to see the streams closed", func() bool { return srv.Engine().Stats().KVSubscribers == 0 })
	}
}

// TestKVEventsJoinedLate: a worker Join registered as a placeholder (its
// engine was not up) has no subscription; the connected worker that replaces
// it gets one, and its events flow.
func TestKVEventsJoinedLate(t *testing.T) {
	addr := freeAddr(t)
	reg := workers.NewRegistry()
	rec := newKVRecorder()
	subs, _ := runKVSubscriptions(t, reg, rec)
	p, err := workers.Join(t.Context(), reg, addr, workers.ConnectOptions{Timeout: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Connected() {
		t.Fatal("the engine is not up yet, but Join connected")
	}
	handledSoFar(t, reg, subs)
	if _, ok := subs.Status(p.URL()); ok {
		t.Error("a placeholder got a subscription")
	}

	cfg := simConfig()
	cfg.Protocol = sim.ProtocolSGLang
	srv, err := sim.Start(cfg, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	testutil.Eventually(t, "the connected worker's subscription", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })
	w, _ := reg.Get(addr)
	defer w.Close()
	prompt := testutil.Tokens(10, 32)
	generate(t, w, "late", prompt)
	testutil.Eventually(t, "the late engine's events", func() bool { return hasPages(rec, w.URL(), prompt, 16) })
}

// TestKVEventsUnimplemented: an engine answering SubscribeKvEvents
// UNIMPLEMENTED (an engine started without KV events) leaves the worker
// approximate at once, and is asked again only after Recheck, not at every
// backoff (10 ms here: a retry loop would ask a dozen times meanwhile); an
// engine that publishes events by then is mirrored from them.
func TestKVEventsUnimplemented(t *testing.T) {
	const recheck = 300 * time.Millisecond
	for _, p := range allSimProtocols {
		t.Run(p.name, func(t *testing.T) {
			srv, w := simtest.Worker(t, simtest.Config(p.name))
			e := srv.Engine()
			e.SetFaults(sim.Faults{RPC: sim.RPCFaults{Unimplemented: "SubscribeKvEvents"}})
			reg := workers.NewRegistry()
			_ = reg.Add(w)
			rec := newKVRecorder()
			began := time.Now()
			subs, _ := runKVSubscriptions(t, reg, rec, func(c *workers.KVSubscriptionConfig) { c.Recheck = recheck })

			testutil.Eventually(t, "approximate mode", func() bool { return mode(subs, w.URL()) == workers.KVModeApproximate })
			e.SetFaults(sim.Faults{})
			// On a loaded machine a recheck can come before the fault is
			// cleared and be refused too. Every subscription counted by now
			// may have been refused; every later one is accepted.
			refused := e.Calls("SubscribeKvEvents")
			if most := 1 + uint64(time.Since(began)/recheck); refused > most {
				t.Errorf("%d subscriptions while refused; want at most %d, one per Recheck", refused, most)
			}
			if err := e.WaitCalls(testutil.Context(t, 5*time.Second), "SubscribeKvEvents", 2); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(began); d < recheck {
				t.Errorf("asked again after %v; want Recheck (%v) or more", d, recheck)
			}
			prompt := testutil.Tokens(10, 32)
			generate(t, w, "after-recheck", prompt)
			testutil.Eventually(t, "events mode", func() bool { return mode(subs, w.URL()) == workers.KVModeEvents })
			if n := e.Calls("SubscribeKvEvents"); n < 2 || n > refused+1 {
				t.Errorf("%d subscriptions, %d of them before the fault was cleared; want the refused ones and one recheck", n, refused)
			}
			if got := rec.log(w.URL()); len(got) < 2 || got[0] != "approximate" || !slices.Contains(got, "exact") {
				t.Errorf("handler calls %q; want approximate, then the events and exact", got)
			}
		})
	}
}

// TestKVEventsGapsBackOff: an engine that loses every other batch (the
// simulator's drop fault) makes every stream end in a gap. Each new
// subscription waits the backoff, doubling from one gap to the next,
// instead of starting again at once (which made thousands of
// subscriptions, and as many WARN lines, in seconds). The waits are lower
// bounds, which a loaded machine only lengthens.
//
// Traffic goes in step with the subscriptions: requests are sent only once
// the engine has the next subscription, one at a time until its stream
// shows the gap. Requests sent while the router backs off would reach no
// subscriber, and a flood of them once used up the prompts the engine
// accepts before the fifth gap on a fast machine (and then, refused, made
// no batches at all).
func TestKVEventsGapsBackOff(t *testing.T) {
	const (
		initial = 20 * time.Millisecond
		want    = 5 // gaps: four backoffs, doubling
		// most bounds the requests, so that a stall fails here rather than
		// at the engine's vocabulary (prompt i is ids 32i to 32i+31). A
		// stream sees a gap a few batches after the engine registers it;
		// a router slow to read them takes a few dozen requests more.
		most = 2000
	)
	for _, p := range allSimProtocols {
		t.Run(p.name, func(t *testing.T) {
			srv, w := simtest.Worker(t, simtest.Config(p.name))
			e := srv.Engine()
			e.SetFaults(sim.Faults{KVEventDropEvery: 2})
			reg := workers.NewRegistry()
			_ = reg.Add(w)
			gaps := make(chan time.Time, 64)
			subs, _ := runKVSubscriptions(t, reg, newKVRecorder(), func(c *workers.KVSubscriptionConfig) {
				c.InitialBackoff, c.MaxBackoff, c.Jitter = initial, time.Minute, 0
				c.Metrics.Gap = func(string) { gaps <- time.Now() }
			})

			var at []time.Time
			for i := 0; len(at) < want; {
				// The subscription after the last gap, opened once its
				// backoff is over.
				if err := e.WaitCalls(testutil.Context(t, 10*time.Second), "SubscribeKvEvents", uint64(len(at)+1)); err != nil {
					t.Fatalf("after %d gaps: %v", len(at), err)
				}
				// Each request publishes at least its prompt's pages; every
				// other batch is lost, so a few requests make a gap. The
				// gap may be seen after the request has returned: the
				// next request's check finds it.
				for n := len(at); len(at) == n; i++ {
					if i == most {
						t.Fatalf("%d gaps after %d requests", len(at), i)
					}
					generate(t, w, fmt.Sprint("gap-", i), testutil.Tokens(uint32(32*i), 32))
					select {
					case g := <-gaps:
						at = append(at, g)
					default:
					}
				}
			}
			backoff := initial
			for i := 1; i < len(at); i++ {
				if d := at[i].Sub(at[i-1]); d < backoff {
					t.Errorf("gap %d came %v after gap %d; the backoff before it was %v", i+1, d, i, backoff)
				}
				backoff *= 2
			}
			if st, _ := subs.Status(w.URL()); st.Gaps < want {
				t.Errorf("status counts %d gaps; want %d or more", st.Gaps, want)
			}
		})
	}
}

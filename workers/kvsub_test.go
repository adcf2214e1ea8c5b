package workers_test

// The subscription's rules, one scenario per row: what the engine's stream
// does (batches, failures, time passing) and what the handler must have been
// told. The engine here is a plain Go value implementing KVEventSource, not a
// gRPC server: the rows need gaps, duplicates and failures at exact moments,
// which the simulator cannot inject yet (see kvsub_sim_test.go for the same
// code over gRPC). Time is synctest's fake clock, so backoffs are exact and
// the tests take no wall time.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
)

// kvCounts is the part of a KVEventStatus a scenario states.
type kvCounts struct {
	Mode                                        workers.KVEventMode
	Gaps, Resets, Resyncs, Duplicates, Failures uint64
}

func TestKVSubscriptionSequence(t *testing.T) {
	const ms = time.Millisecond
	unavailable := code(codes.Unavailable)
	tests := []struct {
		name  string
		steps []kvStep
		want  []string
		count kvCounts
	}{
		{
			name:  "a fresh stream's first batch is the baseline and confirms the stream; the next follow in order",
			steps: []kvStep{opens(0, 0), batch(0, 5), batch(0, 6), batch(0, 7)},
			want:  []string{"apply 0:5", "exact", "apply 0:6", "apply 0:7"},
			count: kvCounts{Mode: workers.KVModeEvents},
		},
		{
			name:  "numbering may start at 0",
			steps: []kvStep{opens(0, 0), batch(0, 0), batch(0, 1)},
			want:  []string{"apply 0:0", "exact", "apply 0:1"},
			count: kvCounts{Mode: workers.KVModeEvents},
		},
		{
			name:  "a batch seen before on the same stream is a duplicate, skipped",
			steps: []kvStep{opens(0, 0), batch(0, 5), batch(0, 6), batch(0, 6), batch(0, 5), batch(0, 7)},
			want:  []string{"apply 0:5", "exact", "apply 0:6", "apply 0:7"},
			count: kvCounts{Mode: workers.KVModeEvents, Duplicates: 2},
		},
		{
			name:  "a gap resets the worker and subscribes again from 0 after the backoff",
			steps: []kvStep{opens(0, 0), batch(0, 5), batch(0, 7), opens(0, 100*ms), batch(0, 20)},
			want:  []string{"apply 0:5", "exact", "reset 0", "apply 0:20"},
			count: kvCounts{Mode: workers.KVModeEvents, Gaps: 1},
		},
		{
			name:  "a broken stream resumes after the last batch applied, after the backoff, seamlessly",
			steps: []kvStep{opens(0, 0), batch(0, 5), batch(0, 6), fails(unavailable), opens(6, 100*ms), again(0, 6), batch(0, 7)},
			want:  []string{"apply 0:5", "exact", "apply 0:6", "apply 0:7"},
			count: kvCounts{Mode: workers.KVModeEvents, Failures: 1},
		},
		{
			name: "a resumed stream that opens with the next batch (the engine sends only live ones) goes on unverified",
			steps: []kvStep{opens(0, 0), batch(0, 5), batch(0, 6), fails(unavailable), opens(6, 100*ms), heartbeat(0, 6),
				batch(0, 7), again(0, 6)},
			want:  []string{"apply 0:5", "exact", "apply 0:6", "apply 0:7"},
			count: kvCounts{Mode: workers.KVModeEvents, Duplicates: 1, Failures: 1},
		},
		{
			name: "a restarted engine that numbered past the old position shows another batch under the last number: " +
				"reset, and subscribe from 0 at once; a first batch above 0 there is a gap (the new process's first were lost)",
			steps: []kvStep{opens(0, 0), batch(0, 5), batch(0, 6), fails(unavailable), opens(6, 100*ms), heartbeat(0, 6),
				other(0, 6), opens(0, 0), fails(unavailable), opens(0, 200*ms), batch(0, 9), batch(0, 10)},
			want:  []string{"apply 0:5", "exact", "apply 0:6", "reset 0", "apply 0:9", "apply 0:10"},
			count: kvCounts{Mode: workers.KVModeEvents, Resets: 1, Gaps: 1, Failures: 2},
		},
		{
			name: "a restart past the old position on an engine that replays from its first batch loses nothing",
			steps: []kvStep{opens(0, 0), batch(0, 5), batch(0, 6), fails(unavailable), opens(6, 100*ms), other(0, 6),
				opens(0, 0), batch(0, 0), batch(0, 1)},
			want:  []string{"apply 0:5", "exact", "apply 0:6", "reset 0", "apply 0:0", "apply 0:1"},
			count: kvCounts{Mode: workers.KVModeEvents, Resets: 1, Failures: 1},
		},
		{
			name:  "after one batch numbered 0, a restart shows another batch 0: reset, and the batch is the new baseline",
			steps: []kvStep{opens(0, 0), batch(0, 0), fails(unavailable), opens(0, 100*ms), other(0, 0), batch(0, 1)},
			want:  []string{"apply 0:0", "exact", "reset 0", "apply 0:0", "apply 0:1"},
			count: kvCounts{Mode: workers.KVModeEvents, Resets: 1, Failures: 1},
		},
		{
			name: "with one data-parallel rank known, that rank resumes one early; another rank's first batch is its baseline, not the comparison",
			steps: []kvStep{opens(0, 0), batch(1, 4), batch(1, 5), fails(unavailable), opens(5, 100*ms), batch(0, 9), again(1, 5),
				batch(1, 6)},
			want:  []string{"apply 1:4", "exact", "apply 1:5", "apply 0:9", "apply 1:6"},
			count: kvCounts{Mode: workers.KVModeEvents, Failures: 1},
		},
		{
			name:  "a hybrid model's batch sent again is the same, though the subscription dropped part of it when it applied it",
			steps: []kvStep{opens(0, 0), hybrid(0, 5), fails(unavailable), opens(5, 100*ms), again(0, 5), batch(0, 6)},
			want:  []string{"apply 0:5", "exact", "apply 0:6"},
			count: kvCounts{Mode: workers.KVModeEvents, Failures: 1},
		},
		{
			name: "only a resumed stream's first batch is compared: another under the last number later is a duplicate",
			steps: []kvStep{opens(0, 0), batch(0, 5), batch(0, 6), fails(unavailable), opens(6, 100*ms), again(0, 6),
				other(0, 6), batch(0, 7)},
			want:  []string{"apply 0:5", "exact", "apply 0:6", "apply 0:7"},
			count: kvCounts{Mode: workers.KVModeEvents, Duplicates: 1, Failures: 1},
		},
		{
			name:  "a stream the engine closed (EOF) resumes the same way",
			steps: []kvStep{opens(0, 0), batch(0, 5), fails(io.EOF), opens(5, 100*ms), again(0, 5), batch(0, 6)},
			want:  []string{"apply 0:5", "exact", "apply 0:6"},
			count: kvCounts{Mode: workers.KVModeEvents, Failures: 1},
		},
		{
			name:  "a slow subscriber dropped by the engine (RESOURCE_EXHAUSTED) resumes the same way",
			steps: []kvStep{opens(0, 0), batch(0, 5), fails(code(codes.ResourceExhausted)), opens(5, 100*ms), again(0, 5), batch(0, 6)},
			want:  []string{"apply 0:5", "exact", "apply 0:6"},
			count: kvCounts{Mode: workers.KVModeEvents, Failures: 1},
		},
		{
			name:  "a resumed stream that opens with a gap resets and subscribes from 0",
			steps: []kvStep{opens(0, 0), batch(0, 5), fails(unavailable), opens(5, 100*ms), batch(0, 9), opens(0, 200*ms), batch(0, 30)},
			want:  []string{"apply 0:5", "exact", "reset 0", "apply 0:30"},
			count: kvCounts{Mode: workers.KVModeEvents, Gaps: 1, Failures: 1},
		},
		{
			name:  "numbers going backwards on a resumed stream are an engine restart: reset, and the batch is the new baseline",
			steps: []kvStep{opens(0, 0), batch(0, 5), batch(0, 6), fails(unavailable), opens(6, 100*ms), batch(0, 0), batch(0, 1)},
			want:  []string{"apply 0:5", "exact", "apply 0:6", "reset 0", "apply 0:0", "apply 0:1"},
			count: kvCounts{Mode: workers.KVModeEvents, Resets: 1, Failures: 1},
		},
		{
			name:  "OUT_OF_RANGE resets and subscribes from 0 after the backoff",
			steps: []kvStep{opens(0, 0), batch(0, 5), fails(code(codes.OutOfRange)), opens(0, 100*ms), batch(0, 8)},
			want:  []string{"apply 0:5", "exact", "reset 0", "apply 0:8"},
			count: kvCounts{Mode: workers.KVModeEvents, Resyncs: 1, Failures: 1},
		},
		{
			name:  "DATA_LOSS (also a batch that broke the protocol) resets and subscribes from 0 after the backoff",
			steps: []kvStep{opens(0, 0), batch(0, 5), fails(code(codes.DataLoss)), opens(0, 100*ms), batch(0, 8)},
			want:  []string{"apply 0:5", "exact", "reset 0", "apply 0:8"},
			count: kvCounts{Mode: workers.KVModeEvents, Resyncs: 1, Failures: 1},
		},
		{
			name: "a resume refused with OUT_OF_RANGE subscribes from 0 after the backoff",
			steps: []kvStep{opens(0, 0), batch(0, 5), fails(unavailable), refuseNext(code(codes.OutOfRange)),
				opens(5, 100*ms), opens(0, 200*ms), batch(0, 40)},
			want:  []string{"apply 0:5", "exact", "reset 0", "apply 0:40"},
			count: kvCounts{Mode: workers.KVModeEvents, Resyncs: 1, Failures: 2},
		},
		{
			name: "DATA_LOSS before any batch backs off instead of spinning",
			steps: []kvStep{opens(0, 0), fails(code(codes.DataLoss)), opens(0, 100*ms), fails(code(codes.DataLoss)),
				opens(0, 200*ms)},
			want:  nil,
			count: kvCounts{Mode: workers.KVModeConnecting, Resyncs: 2, Failures: 2},
		},
		{
			name:  "several ranks cannot resume from one start: every rank is reset and the subscription starts from 0",
			steps: []kvStep{opens(0, 0), batch(0, 5), batch(1, 9), batch(1, 10), fails(unavailable), opens(0, 100*ms), batch(1, 12), batch(0, 7)},
			want:  []string{"apply 0:5", "exact", "apply 1:9", "apply 1:10", "reset 0", "reset 1", "apply 1:12", "apply 0:7"},
			count: kvCounts{Mode: workers.KVModeEvents, Resyncs: 1, Failures: 1},
		},
		{
			name:  "ranks are numbered apart: each has its own baseline, gaps and duplicates",
			steps: []kvStep{opens(0, 0), batch(0, 5), batch(1, 100), batch(0, 6), batch(1, 100), batch(1, 101)},
			want:  []string{"apply 0:5", "exact", "apply 1:100", "apply 0:6", "apply 1:101"},
			count: kvCounts{Mode: workers.KVModeEvents, Duplicates: 1},
		},
		{
			name: "UNIMPLEMENTED: the engine has no events; approximate, asked again only every Recheck (2 s here)",
			steps: []kvStep{refuseAll(code(codes.Unimplemented)), opens(0, 0), opens(0, 2*time.Second),
				opens(0, 2*time.Second), idle(time.Second)},
			want:  []string{"approximate"},
			count: kvCounts{Mode: workers.KVModeApproximate, Failures: 3},
		},
		{
			name: "UNIMPLEMENTED after events flowed (an engine restarted without them): reset, approximate; " +
				"events again at the recheck (restarted with them) are mirrored",
			steps: []kvStep{opens(0, 0), batch(0, 5), fails(code(codes.Unimplemented)), opens(0, 2*time.Second), batch(0, 1)},
			want:  []string{"apply 0:5", "exact", "reset 0", "approximate", "apply 0:1", "exact"},
			count: kvCounts{Mode: workers.KVModeEvents, Failures: 1},
		},
		{
			name:  "an idle stream open for ConfirmAfter without an error is confirmed",
			steps: []kvStep{opens(0, 0), idle(time.Second)},
			want:  []string{"exact"},
			count: kvCounts{Mode: workers.KVModeEvents},
		},
		{
			name:  "a stream that fails before ConfirmAfter is not confirmed",
			steps: []kvStep{opens(0, 0), idle(900 * ms), fails(unavailable), opens(0, 100*ms)},
			want:  nil,
			count: kvCounts{Mode: workers.KVModeConnecting, Failures: 1},
		},
		{
			name: "the backoff doubles up to MaxBackoff; a batch alone does not start it over",
			steps: []kvStep{refuseAll(unavailable), opens(0, 0), opens(0, 100*ms), opens(0, 200*ms), opens(0, 400*ms),
				opens(0, 800*ms), opens(0, time.Second), opens(0, time.Second), refuseAll(nil), opens(0, time.Second),
				batch(0, 3), fails(unavailable), idle(900 * ms)}, // no attempt after 100 ms
			want:  []string{"apply 0:3", "exact"},
			count: kvCounts{Mode: workers.KVModeEvents, Failures: 8},
		},
		{
			name: "the backoff starts over once a stream has stayed open without a gap or an error for StableAfter",
			steps: []kvStep{opens(0, 0), batch(0, 5), fails(unavailable), opens(5, 100*ms), batch(0, 6),
				idle(9 * time.Second), fails(unavailable), opens(6, 200*ms), batch(0, 7),
				idle(10 * time.Second), fails(unavailable), opens(7, 100*ms), batch(0, 8)},
			want:  []string{"apply 0:5", "exact", "apply 0:6", "apply 0:7", "apply 0:8"},
			count: kvCounts{Mode: workers.KVModeEvents, Failures: 3},
		},
		{
			name: "an engine that keeps skipping numbers is resubscribed with a doubling backoff, not at once",
			steps: []kvStep{opens(0, 0), batch(0, 5), batch(0, 7), opens(0, 100*ms), batch(0, 1), batch(0, 3),
				opens(0, 200*ms), batch(0, 1), batch(0, 3), opens(0, 400*ms), batch(0, 1), batch(0, 3),
				opens(0, 800*ms), batch(0, 1), batch(0, 3), opens(0, time.Second)},
			want: []string{"apply 0:5", "exact", "reset 0", "apply 0:1", "reset 0", "apply 0:1", "reset 0",
				"apply 0:1", "reset 0", "apply 0:1", "reset 0"},
			count: kvCounts{Mode: workers.KVModeEvents, Gaps: 5},
		},
		{
			name: "a stream broken for longer than MaxBackoff makes the worker approximate until it is back",
			steps: []kvStep{opens(0, 0), batch(0, 5), fails(unavailable), refuseAll(unavailable),
				opens(5, 100*ms), opens(5, 200*ms), opens(5, 400*ms), // 700 ms broken
				refuseAll(nil), opens(5, 800*ms), // the worker went approximate at 1 s
				batch(0, 6)},
			want:  []string{"apply 0:5", "exact", "approximate", "apply 0:6", "exact"},
			count: kvCounts{Mode: workers.KVModeEvents, Failures: 4},
		},
		{
			name: "a worker approximate after a long break comes back through a reset when the engine restarted",
			steps: []kvStep{opens(0, 0), batch(0, 5), fails(unavailable), refuseAll(unavailable),
				opens(5, 100*ms), opens(5, 200*ms), opens(5, 400*ms), refuseAll(nil), opens(5, 800*ms),
				batch(0, 1)},
			want:  []string{"apply 0:5", "exact", "approximate", "reset 0", "apply 0:1", "exact"},
			count: kvCounts{Mode: workers.KVModeEvents, Resets: 1, Failures: 4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const url = "grpc://10.0.0.1:30000"
				w, src := newKVWorker(url)
				reg := workers.NewRegistry()
				if err := reg.Add(w); err != nil {
					t.Fatal(err)
				}
				rec := newKVRecorder()
				subs, err := workers.NewKVSubscriptions(kvTestConfig(rec))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error)
				h := &kvHarness{t: t, src: src, run: func() { go func() { done <- subs.Run(ctx, reg) }() }}
				for _, step := range tt.steps {
					step(h)
				}
				synctest.Wait()
				if n := len(src.attempts()); n != h.opened {
					t.Errorf("%d subscription attempts, the scenario expects %d", n, h.opened)
				}
				if got := rec.log(url); !slices.Equal(got, tt.want) {
					t.Errorf("handler calls:\n got %q\nwant %q", got, tt.want)
				}
				st, ok := subs.Status(url)
				if !ok {
					t.Fatal("no status for the worker")
				}
				got := kvCounts{st.Mode, st.Gaps, st.Resets, st.Resyncs, st.Duplicates, st.Failures}
				if got != tt.count {
					t.Errorf("status %+v, want %+v", got, tt.count)
				}

				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run = %v", err)
				}
				// synctest.Test fails if any goroutine Run started is left.
			})
		})
	}
}

// TestKVSubscriptionStatus: what an operator sees, and the metric hooks.
func TestKVSubscriptionStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const url = "grpc://10.0.0.1:30000"
		w, src := newKVWorker(url)
		reg := workers.NewRegistry()
		_ = reg.Add(w)

		var mu sync.Mutex
		counted := map[string]int{}
		var lags []time.Duration
		count := func(what string, n int) {
			mu.Lock()
			counted[what] += n
			mu.Unlock()
		}
		cfg := kvTestConfig(newKVRecorder())
		cfg.Metrics = workers.KVEventMetrics{
			Applied:   func(_ string, kind workers.KVEventKind, n int) { count(kind.String(), n) },
			Gap:       func(string) { count("gap", 1) },
			Reset:     func(string) { count("reset", 1) },
			Resync:    func(string) { count("resync", 1) },
			Duplicate: func(string) { count("duplicate", 1) },
			Failure:   func(_ string, c codes.Code) { count("failure "+c.String(), 1) },
			Lag: func(_ string, lag time.Duration) {
				mu.Lock()
				lags = append(lags, lag)
				mu.Unlock()
			},
		}
		subs, err := workers.NewKVSubscriptions(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go func() { _ = subs.Run(ctx, reg) }()
		synctest.Wait()

		if st, ok := subs.Status(url); !ok || st.Mode != workers.KVModeConnecting || st.HasLastSeq {
			t.Errorf("before any batch: %+v, %v", st, ok)
		}
		h := &kvHarness{t: t, src: src}
		opens(0, 0)(h)
		if st, _ := subs.Status("10.0.0.1:30000"); !st.Connected {
			t.Errorf("open stream not Connected (status looked up by host:port): %+v", st)
		}

		old := batchOf(0, 7)
		old.Timestamp = time.Now().Add(-2 * time.Second)
		old.Events = append(old.Events,
			workers.KVEvent{Kind: workers.KVRemoved, Hashes: []int64{1, 2}},
			workers.KVEvent{Kind: workers.KVStored, Blocks: old.Events[0].Blocks},
			workers.KVEvent{Kind: workers.KVCleared})
		h.deliver(kvItem{b: old})
		future := batchOf(0, 8)
		future.Timestamp = time.Now().Add(time.Second) // an engine clock ahead of ours
		h.deliver(kvItem{b: future})
		unstamped := batchOf(0, 9)
		unstamped.Timestamp = time.Time{}
		h.deliver(kvItem{b: unstamped})
		batch(0, 9)(h)
		batch(0, 11)(h) // a gap
		opens(0, 100*time.Millisecond)(h)
		fails(code(codes.DataLoss))(h)
		opens(0, 200*time.Millisecond)(h)
		batch(0, 3)(h)
		fails(code(codes.Unavailable))(h)
		opens(3, 400*time.Millisecond)(h)
		batch(0, 1)(h) // the engine restarted

		st, _ := subs.Status(url)
		if !st.LastBatch.Equal(time.Now()) {
			t.Errorf("LastBatch %v, want now (%v)", st.LastBatch, time.Now())
		}
		st.LastBatch = time.Time{}
		want := workers.KVEventStatus{
			Mode: workers.KVModeEvents, Connected: true, LastSeq: 1, HasLastSeq: true,
			Batches: 5, Stored: 6, Removed: 1, Cleared: 1,
			Gaps: 1, Resets: 1, Resyncs: 1, Duplicates: 1, Failures: 2,
			LastError: "rpc error: code = Unavailable desc = Unavailable",
		}
		if st != want {
			t.Errorf("status\n got %+v\nwant %+v", st, want)
		}
		wantCounted := map[string]int{"stored": 6, "removed": 1, "cleared": 1, "gap": 1, "reset": 1, "resync": 1,
			"duplicate": 1, "failure DataLoss": 1, "failure Unavailable": 1}
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(counted) != fmt.Sprint(wantCounted) {
			t.Errorf("metrics %v, want %v", counted, wantCounted)
		}
		// Every stamped batch received is observed (the duplicate's and the
		// gap's too), one stamped ahead of our clock as 0.
		if !slices.Equal(lags, []time.Duration{2 * time.Second, 0, 0, 0, 0, 0}) {
			t.Errorf("lags %v", lags)
		}
	})
}

// TestKVSubscriptionsFollowTheRegistry: one subscription per registered
// worker, for as long as it is registered; a worker replaced or re-added
// starts from scratch; cancelling Run's context ends everything.
func TestKVSubscriptionsFollowTheRegistry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, srcA := newKVWorker("grpc://10.0.0.1:1")
		b, srcB := newKVWorker("grpc://10.0.0.2:1")
		reg := workers.NewRegistry()
		_ = reg.Add(a)
		rec := newKVRecorder()
		subs, err := workers.NewKVSubscriptions(kvTestConfig(rec))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- subs.Run(ctx, reg) }()
		synctest.Wait()
		if err := subs.Run(ctx, reg); err == nil {
			t.Error("a second Run did not fail")
		}

		// A worker added later is followed too.
		_ = reg.Add(b)
		synctest.Wait()
		for _, src := range []*kvScript{srcA, srcB} {
			if n := len(src.attempts()); n != 1 {
				t.Fatalf("%d subscriptions, want 1", n)
			}
		}
		if n := kvGoroutines(t, b.URL()); n == 0 {
			t.Fatal("no subscription goroutine labelled with the added worker")
		}
		(&kvHarness{t: t, src: srcB}).deliver(kvItem{b: batchOf(0, 1)})

		// Removed: the stream closes, no handler call follows, the goroutines end.
		streamB := srcB.stream()
		if _, err := reg.Remove(b.URL()); err != nil {
			t.Fatal(err)
		}
		calls := len(rec.log(b.URL()))
		streamB.send(kvItem{b: batchOf(0, 2)}) // may race the closing; must not be applied
		synctest.Wait()
		if !streamB.closed() || len(rec.log(b.URL())) != calls {
			t.Errorf("after removal: stream closed %v, handler calls %q", streamB.closed(), rec.log(b.URL()))
		}
		if _, ok := subs.Status(b.URL()); ok {
			t.Error("a removed worker still has a status")
		}
		if n := kvGoroutines(t, b.URL()); n != 0 {
			t.Errorf("%d goroutines of the removed worker's subscription left", n)
		}

		// Re-added (the same *Worker): a new subscription from scratch.
		_ = reg.Add(b)
		synctest.Wait()
		if got := srcB.attempts(); len(got) != 2 || got[1].start != 0 {
			t.Errorf("re-added worker's subscriptions %+v, want a second from 0", got)
		}
		if st, _ := subs.Status(b.URL()); st.Batches != 0 || st.Mode != workers.KVModeConnecting {
			t.Errorf("re-added worker's status carried over: %+v", st)
		}

		// Replaced in place (same URL, new *Worker): the old stream closes, the new worker subscribes from 0.
		streamA := srcA.stream()
		(&kvHarness{t: t, src: srcA}).deliver(kvItem{b: batchOf(0, 9)})
		a2, srcA2 := newKVWorker(a.URL())
		if err := reg.Replace(a, a2); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if !streamA.closed() {
			t.Error("the replaced worker's stream is still open")
		}
		if got := srcA2.attempts(); len(got) != 1 || got[0].start != 0 {
			t.Errorf("replacement's subscriptions %+v, want one from 0", got)
		}
		if st, _ := subs.Status(a.URL()); st.HasLastSeq {
			t.Errorf("the replacement's status is the old worker's: %+v", st)
		}

		// A worker whose backend has no events is not subscribed.
		plain := workers.NewWorker("grpc://10.0.0.3:1", workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, struct{ workers.Backend }{}, nil)
		_ = reg.Add(plain)
		synctest.Wait()
		if _, ok := subs.Status(plain.URL()); ok {
			t.Error("a backend without events got a subscription")
		}

		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
		// Run waits for its goroutines, but one that has told Run it is
		// done may not have returned yet; once every goroutine of the
		// bubble is blocked, one still there is a leak.
		synctest.Wait()
		for _, st := range []*kvFakeStream{srcA2.stream(), srcB.stream()} {
			if !st.closed() {
				t.Error("a stream outlived Run")
			}
		}
		for _, w := range []*workers.Worker{a, b} {
			if n := kvGoroutines(t, w.URL()); n != 0 {
				t.Errorf("%d goroutines of %s left after Run returned", n, w)
			}
		}
	})
}

func TestKVSubscriptionConfigValidate(t *testing.T) {
	rec := newKVRecorder()
	tests := []struct {
		name   string
		change func(*workers.KVSubscriptionConfig)
		ok     bool
	}{
		{"defaults", func(*workers.KVSubscriptionConfig) {}, true},
		{"no jitter and confirm at once are values", func(c *workers.KVSubscriptionConfig) { c.Jitter, c.ConfirmAfter = 0, 0 }, true},
		{"no handler", func(c *workers.KVSubscriptionConfig) { c.Handler = nil }, false},
		{"zero initial backoff would spin", func(c *workers.KVSubscriptionConfig) { c.InitialBackoff = 0 }, false},
		{"max backoff below the initial", func(c *workers.KVSubscriptionConfig) { c.MaxBackoff = c.InitialBackoff / 2 }, false},
		{"jitter of 100%", func(c *workers.KVSubscriptionConfig) { c.Jitter = 1 }, false},
		{"negative jitter", func(c *workers.KVSubscriptionConfig) { c.Jitter = -0.1 }, false},
		{"negative confirmation", func(c *workers.KVSubscriptionConfig) { c.ConfirmAfter = -time.Second }, false},
		{"a backoff that starts over as soon as a stream opens", func(c *workers.KVSubscriptionConfig) { c.StableAfter = 0 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := workers.DefaultKVSubscriptionConfig(rec)
			tt.change(&cfg)
			_, err := workers.NewKVSubscriptions(cfg)
			if (err == nil) != tt.ok {
				t.Errorf("NewKVSubscriptions: %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// TestKVSubscriptionWarnsOncePerMinute: an engine that skips numbers again
// and again gets one WARN line a minute, the next saying how many were held
// back, instead of one per resubscription.
func TestKVSubscriptionWarnsOncePerMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const url = "grpc://10.0.0.1:30000"
		w, src := newKVWorker(url)
		reg := workers.NewRegistry()
		_ = reg.Add(w)
		logs := &testutil.Logs{Level: slog.LevelDebug}
		cfg := kvTestConfig(newKVRecorder())
		cfg.Logger = logs.Logger()
		subs, err := workers.NewKVSubscriptions(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go func() { _ = subs.Run(ctx, reg) }()
		h := &kvHarness{t: t, src: src}
		opens(0, 0)(h)
		gap := func() {
			batch(0, 1)(h)
			batch(0, 3)(h)
		}
		gap()
		for _, wait := range []time.Duration{100, 200, 400, 800, 1000, 1000, 1000} {
			opens(0, wait*time.Millisecond)(h)
			gap()
		}
		if n := len(logs.Records(slog.LevelWarn)); n != 1 {
			t.Errorf("%d WARN lines for 8 gaps within seconds, want 1", n)
		}
		opens(0, time.Second)(h)
		idle(time.Minute)(h)
		gap()
		warns := logs.Records(slog.LevelWarn)
		if len(warns) != 2 {
			t.Fatalf("%d WARN lines after a minute more, want 2", len(warns))
		}
		if v, ok := testutil.Attr(warns[1], "suppressed"); !ok || v.Int64() != 7 {
			t.Errorf("the second WARN line says suppressed=%v (%v), want 7", v, ok)
		}
		if st, _ := subs.Status(url); st.Gaps != 9 {
			t.Errorf("status counts %d gaps, want 9", st.Gaps)
		}
	})
}

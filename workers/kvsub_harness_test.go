package workers_test

// What the subscription tests share: a handler that writes down its calls,
// an engine's event source played by hand (a plain Go value, not a gRPC
// server), the steps scenarios are written in, and a count of a worker's
// subscription goroutines.

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/workers"
)

// kvRecorder is a KVEventHandler that writes down every call as a line:
// "apply R:S" (rank, sequence number), "reset R", "exact", "approximate".
type kvRecorder struct {
	mu      sync.Mutex
	lines   map[string][]string
	batches map[string][]*workers.KVEventBatch
}

func newKVRecorder() *kvRecorder {
	return &kvRecorder{lines: map[string][]string{}, batches: map[string][]*workers.KVEventBatch{}}
}

func (r *kvRecorder) ApplyKVEvents(w string, b *workers.KVEventBatch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines[w] = append(r.lines[w], fmt.Sprintf("apply %d:%d", b.DPRank, b.Seq))
	r.batches[w] = append(r.batches[w], b.Clone()) // b lives only for the call
}

func (r *kvRecorder) ResetKVEvents(w string, rank int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines[w] = append(r.lines[w], fmt.Sprintf("reset %d", rank))
}

func (r *kvRecorder) SetKVEventMode(w string, exact bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines[w] = append(r.lines[w], map[bool]string{true: "exact", false: "approximate"}[exact])
}

// log is what worker w's handler calls were, in order.
func (r *kvRecorder) log(w string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines[w])
}

// applied is the batches applied for w, in order.
func (r *kvRecorder) applied(w string) []*workers.KVEventBatch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches[w])
}

// kvScript is an engine's event source played by a test: every
// SubscribeKVEvents call is written down, and opens a stream the test feeds
// by hand unless the test told it to refuse.
type kvScript struct {
	mu           sync.Mutex
	refusals     []error // the next calls fail with these, in order
	refuseAlways error   // then every call fails with this, while set
	opens        []kvOpen
	cur          *kvFakeStream
}

type kvOpen struct {
	start uint64
	at    time.Time
}

func (s *kvScript) SubscribeKVEvents(ctx context.Context, start uint64) (workers.KVEventStream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opens = append(s.opens, kvOpen{start: start, at: time.Now()})
	if len(s.refusals) > 0 {
		err := s.refusals[0]
		s.refusals = s.refusals[1:]
		return nil, err
	}
	if s.refuseAlways != nil {
		return nil, s.refuseAlways
	}
	s.cur = &kvFakeStream{ctx: ctx, in: make(chan kvItem)}
	return s.cur, nil
}

func (s *kvScript) stream() *kvFakeStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

func (s *kvScript) attempts() []kvOpen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.opens)
}

// kvFakeStream yields what the test sends it, and ends with its context, as
// a gRPC stream does.
type kvFakeStream struct {
	ctx context.Context
	in  chan kvItem
}

type kvItem struct {
	b   *workers.KVEventBatch
	err error
}

func (f *kvFakeStream) Recv() (*workers.KVEventBatch, error) {
	select {
	case it := <-f.in:
		return it.b, it.err
	case <-f.ctx.Done():
		return nil, status.FromContextError(f.ctx.Err()).Err()
	}
}

// send hands the subscriber one item, and reports false if the stream was
// closed instead.
func (f *kvFakeStream) send(it kvItem) bool {
	select {
	case f.in <- it:
		return true
	case <-f.ctx.Done():
		return false
	}
}

func (f *kvFakeStream) closed() bool { return f.ctx.Err() != nil }

// kvEngine is a Backend whose only working method is SubscribeKVEvents; the
// subscription calls nothing else.
type kvEngine struct {
	workers.Backend
	*kvScript
}

func newKVWorker(url string) (*workers.Worker, *kvScript) {
	src := &kvScript{}
	return workers.NewWorker(url, workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, kvEngine{kvScript: src}, nil), src
}

// kvTestConfig is the configuration of the scenarios: the defaults' shape
// with a MaxBackoff short enough to reach, and no jitter so that every wait
// is exact.
func kvTestConfig(h workers.KVEventHandler) workers.KVSubscriptionConfig {
	cfg := workers.DefaultKVSubscriptionConfig(h)
	cfg.MaxBackoff = time.Second
	cfg.Jitter = 0
	cfg.Recheck = 2 * time.Second
	return cfg
}

// batchOf is a batch of one stored block, stamped now.
func batchOf(rank int, seq uint64) *workers.KVEventBatch {
	return &workers.KVEventBatch{Seq: seq, DPRank: rank, Timestamp: time.Now(), Events: []workers.KVEvent{{
		Kind:   workers.KVStored,
		Blocks: []workers.KVBlock{{Hash: int64(seq), Tokens: []uint32{1, 2, 3, 4}, BlockSize: 4}},
	}}}
}

// kvHarness runs one worker's subscription inside a synctest bubble.
type kvHarness struct {
	t      *testing.T
	src    *kvScript
	opened int                                 // attempts the steps have accounted for
	run    func()                              // starts the subscriptions, when not nil: the first opens step calls it
	sent   map[[2]uint64]*workers.KVEventBatch // by rank and number, for again
}

type kvStep func(h *kvHarness)

// opens: the next subscription attempt asks for start, after waiting after.
func opens(start uint64, after time.Duration) kvStep {
	return func(h *kvHarness) {
		h.t.Helper()
		if h.run != nil {
			// Steps before the first opens set the engine up before
			// anything subscribes.
			h.run()
			h.run = nil
		}
		began := time.Now()
		for synctest.Wait(); len(h.src.attempts()) <= h.opened; synctest.Wait() {
			if time.Since(began) > time.Hour {
				h.t.Fatalf("no subscription attempt %d within an hour", h.opened+1)
			}
			time.Sleep(5 * time.Millisecond)
		}
		got := h.src.attempts()[h.opened]
		h.opened++
		if got.start != start || got.at.Sub(began) != after {
			h.t.Fatalf("attempt %d: start %d after %v, want start %d after %v", h.opened, got.start, got.at.Sub(began), start, after)
		}
	}
}

// batch: the open stream delivers one batch.
func batch(rank int, seq uint64) kvStep {
	return batchWith(rank, seq, func(*workers.KVEventBatch) {})
}

// hybrid: the open stream delivers a hybrid model's batch: batch's, after
// a store in a sliding-window cache group, which the subscription drops.
func hybrid(rank int, seq uint64) kvStep {
	return batchWith(rank, seq, func(b *workers.KVEventBatch) {
		sw := b.Events[0]
		sw.Group = workers.KVGroup{Index: 1, HasIndex: true, Kind: "sliding_window", SlidingWindow: 32}
		b.Events = append([]workers.KVEvent{sw}, b.Events...)
	})
}

// batchWith: the open stream delivers batch's batch, changed by f.
func batchWith(rank int, seq uint64, f func(*workers.KVEventBatch)) kvStep {
	return func(h *kvHarness) {
		b := batchOf(rank, seq)
		f(b)
		if h.sent == nil {
			h.sent = map[[2]uint64]*workers.KVEventBatch{}
		}
		h.sent[[2]uint64{uint64(rank), seq}] = b.Clone()
		h.deliver(kvItem{b: b})
	}
}

// again: the open stream delivers the batch batch delivered under the same
// rank and number, as an engine replays a batch it kept.
func again(rank int, seq uint64) kvStep {
	return func(h *kvHarness) {
		h.t.Helper()
		b, ok := h.sent[[2]uint64{uint64(rank), seq}]
		if !ok {
			h.t.Fatalf("again(%d, %d): no such batch delivered before", rank, seq)
		}
		h.deliver(kvItem{b: b.Clone()})
	}
}

// other: the open stream delivers another process's batch under rank and
// seq: one stored block named differently from batch's.
func other(rank int, seq uint64) kvStep {
	return func(h *kvHarness) {
		b := batchOf(rank, seq)
		b.Events[0].Blocks[0].Hash = -1 - int64(seq)
		h.deliver(kvItem{b: b})
	}
}

// heartbeat: the open stream delivers a load-only batch numbered seq.
func heartbeat(rank int, seq uint64) kvStep {
	return func(h *kvHarness) {
		h.deliver(kvItem{b: &workers.KVEventBatch{Seq: seq, DPRank: rank, LoadOnly: true}})
	}
}

// fails: the open stream ends with err.
func fails(err error) kvStep {
	return func(h *kvHarness) { h.deliver(kvItem{err: err}) }
}

// refuseNext: the next len(errs) attempts fail with errs, in order.
func refuseNext(errs ...error) kvStep {
	return func(h *kvHarness) {
		h.src.mu.Lock()
		h.src.refusals = append(h.src.refusals, errs...)
		h.src.mu.Unlock()
	}
}

// refuseAll: every later attempt fails with err (nil: none does).
func refuseAll(err error) kvStep {
	return func(h *kvHarness) {
		h.src.mu.Lock()
		h.src.refuseAlways = err
		h.src.mu.Unlock()
	}
}

// idle: time passes.
func idle(d time.Duration) kvStep {
	return func(*kvHarness) {
		time.Sleep(d)
		synctest.Wait()
	}
}

func (h *kvHarness) deliver(it kvItem) {
	h.t.Helper()
	st := h.src.stream()
	if st == nil || !st.send(it) {
		h.t.Fatal("no open stream to deliver to")
	}
	synctest.Wait()
}

func code(c codes.Code) error { return status.Error(c, c.String()) }

// kvGoroutines counts the live goroutines labelled as url's subscription
// (Run labels them with kv_events_worker).
func kvGoroutines(t *testing.T, url string) int {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	label := strconv.Quote("kv_events_worker") + ":" + strconv.Quote(url)
	n := 0
	// Records are "<count> @ <pcs>" then, for labelled goroutines,
	// "# labels: {...}".
	lines := strings.Split(buf.String(), "\n")
	for i := 0; i+1 < len(lines); i++ {
		count, _, ok := strings.Cut(lines[i], " @ ")
		if !ok || !strings.HasPrefix(lines[i+1], "# labels: ") || !strings.Contains(lines[i+1], label) {
			continue
		}
		c, err := strconv.Atoi(count)
		if err != nil {
			t.Fatalf("goroutine profile line %q", lines[i])
		}
		n += c
	}
	return n
}

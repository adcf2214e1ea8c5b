package workers_test

// KV events over ZMQ end to end: the simulated engine publishes its events
// as vLLM's ZmqEventPublisher does (real PUB and ROUTER sockets over
// loopback), and a subscription whose worker has a ZMQEventSource keeps a
// mirror that must equal the engine's cache, through lost batches,
// publisher restarts and hostile payloads.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// pageMirror is a KVEventHandler that applies a worker's events to a copy of
// its cache, as the router's mirror does, and writes its calls down as
// kvRecorder does.
type pageMirror struct {
	*kvRecorder
	mu    sync.Mutex
	pages map[int64]mirrorPage
}

type mirrorPage struct {
	tokens    []uint32
	parent    int64
	hasParent bool
}

func newPageMirror() *pageMirror {
	return &pageMirror{kvRecorder: newKVRecorder(), pages: map[int64]mirrorPage{}}
}

func (m *pageMirror) ApplyKVEvents(w string, b *workers.KVEventBatch) {
	m.kvRecorder.ApplyKVEvents(w, b)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range b.Events {
		switch e.Kind {
		case workers.KVStored:
			parent, has := e.Parent, e.HasParent
			for _, bl := range e.Blocks {
				m.pages[bl.Hash] = mirrorPage{tokens: slices.Clone(bl.Tokens), parent: parent, hasParent: has}
				parent, has = bl.Hash, true
			}
		case workers.KVRemoved:
			for _, h := range e.Hashes {
				delete(m.pages, h)
			}
		case workers.KVCleared:
			clear(m.pages)
		}
	}
}

func (m *pageMirror) ResetKVEvents(w string, rank int) {
	m.kvRecorder.ResetKVEvents(w, rank)
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.pages)
}

// paths is the mirror in Engine.CachedPages's terms: each page with the
// tokens of every page before it; nil paths for pages whose chain is broken.
func (m *pageMirror) paths() [][]uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([][]uint32, 0, len(m.pages))
	for _, p := range m.pages {
		path := slices.Clone(p.tokens)
		for q := p; q.hasParent; {
			var ok bool
			if q, ok = m.pages[q.parent]; !ok {
				path = nil
				break
			}
			path = append(slices.Clone(q.tokens), path...)
		}
		out = append(out, path)
	}
	slices.SortFunc(out, slices.Compare)
	return out
}

func cachePaths(srv *sim.Process) [][]uint32 {
	out := srv.Engine().CachedPages()
	slices.SortFunc(out, slices.Compare)
	return out
}

// zmqFleet is one simulated engine publishing over ZMQ, its worker, and a
// subscription that follows the worker through a ZMQEventSource.
type zmqFleet struct {
	srv    *sim.Process
	pub    *sim.ZMQPublisher
	w      *workers.Worker
	mirror *pageMirror
	subs   *workers.KVSubscriptions
	reg    *workers.Registry
	round  int // workloads run, so that each asks for new pages
	fresh  int // requests sent by until
	skip   int // the publisher's SkipEvery
}

func startZMQFleet(t *testing.T, pcfg sim.ZMQConfig, withReplay bool) *zmqFleet {
	t.Helper()
	srv, w := startZMQSim(t)
	pcfg.Endpoint = "tcp://127.0.0.1:0"
	if withReplay {
		pcfg.Replay = "tcp://127.0.0.1:0"
	}
	pub, err := sim.StartZMQPublisher(srv, pcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)
	src, err := workers.NewZMQEventSource(workers.ZMQEventConfig{Endpoint: pub.Endpoint(), Replay: pub.ReplayEndpoint(), Topic: pcfg.Topic})
	if err != nil {
		t.Fatal(err)
	}
	f := &zmqFleet{srv: srv, pub: pub, w: w, mirror: newPageMirror(), skip: pcfg.SkipEvery}
	f.subscribe(t, src)
	return f
}

// startZMQSim serves a delay-free vLLM engine with a small cache and
// connects a worker to it.
func startZMQSim(t *testing.T) (*sim.Process, *workers.Worker) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Protocol = sim.ProtocolVLLM
	cfg.TimeScale = 0
	cfg.TokenizerDir = "none"
	cfg.VocabSize = 128256
	cfg.EOSTokenID = 128001
	cfg.MaxContextLength = 4096
	cfg.KVCapacityTokens = 2048 // 128 pages: a workload of 60 requests evicts
	cfg.Logger = slog.New(slog.DiscardHandler)
	srv, w := simtest.Worker(t, cfg)
	return srv, w
}

// subscribe follows f's worker through src until the test ends.
func (f *zmqFleet) subscribe(t *testing.T, src workers.KVEventSource) {
	t.Helper()
	reg := workers.NewRegistry()
	_ = reg.Add(f.w)
	f.reg = reg
	scfg := workers.DefaultKVSubscriptionConfig(f.mirror)
	scfg.InitialBackoff = 10 * time.Millisecond
	scfg.Sources = map[string]workers.KVEventSource{f.w.URL(): src}
	f.subs = runKVSubscriptionsWith(t, reg, scfg)
}

func (f *zmqFleet) status() workers.KVEventStatus {
	st, _ := f.subs.Status(f.w.URL())
	return st
}

// warmUp sends requests until the subscription has applied a batch: a PUB
// socket sends nothing to a subscriber whose subscription has not reached
// it yet.
func (f *zmqFleet) warmUp(t *testing.T) {
	t.Helper()
	f.until(t, "a first batch", func() bool { return f.status().Batches > 0 })
}

// until sends requests for new pages, one at a time, until cond holds.
func (f *zmqFleet) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 1000 {
			t.Fatalf("no %s after %d requests: %+v", what, i, f.status())
		}
		f.fresh++
		generate(t, f.w, fmt.Sprintf("fresh-%d", f.fresh), testutil.Tokens(uint32(90_000+(f.fresh*32)%38_000), 32))
	}
}

// settle makes the publisher's last batch one it sent: a batch the PUB
// socket skipped is only replayed when a later one shows the hole.
func (f *zmqFleet) settle(t *testing.T, skipEvery int) {
	t.Helper()
	f.until(t, "batch sent last", func() bool {
		n, _ := f.pub.Published()
		return skipEvery == 0 || n%uint64(skipEvery) != 0
	})
}

// workload runs n requests sharing prefixes: 60 evict from the engine's
// 2048-token cache.
func (f *zmqFleet) workload(t *testing.T, tag string, n int) {
	t.Helper()
	f.round++
	for i := range n {
		prompt := append(testutil.Tokens(uint32(1000*(i%7)), 64), testutil.Tokens(uint32(10_000+(f.round%4)*20_000+i*100), 48)...)
		generate(t, f.w, fmt.Sprintf("%s-%d", tag, i), prompt)
	}
}

// waitMirror waits until the mirror equals the engine's cache, and the
// subscription has applied every batch the publisher numbered.
func (f *zmqFleet) waitMirror(t *testing.T) {
	t.Helper()
	caughtUp := func() (bool, string) {
		n, _ := f.pub.Published()
		if f.skip > 0 && n%uint64(f.skip) == 0 {
			// The last batch is one the publisher skipped (the engine
			// may publish after settle looked): only a later batch
			// shows the subscription the hole to replay.
			f.fresh++
			generate(t, f.w, fmt.Sprintf("fresh-%d", f.fresh), testutil.Tokens(uint32(90_000+(f.fresh*32)%38_000), 32))
			return false, fmt.Sprintf("%d batches published, the last skipped: sent another request", n)
		}
		st := f.status()
		mirror, cache := f.mirror.paths(), cachePaths(f.srv)
		return n > 0 && st.HasLastSeq && st.LastSeq == n-1 && slices.EqualFunc(mirror, cache, slices.Equal),
			fmt.Sprintf("%d batches published, status %+v, %d paths mirrored, %d cached", n, st, len(mirror), len(cache))
	}
	testutil.EventuallyState(t, testutil.Patience, "the mirror to equal the engine's cache, every published batch applied", caughtUp)
}

// TestZMQEventsMirrorEqualsCache: in every shape vLLM has published, with
// and without a topic, the mirror fed over ZMQ equals the engine's cache
// after a workload that fills and evicts it.
func TestZMQEventsMirrorEqualsCache(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shape sim.ZMQShape
		topic string
	}{
		{"maps, bytes hashes, no topic", sim.ZMQShapeMap, ""},
		{"arrays, integer hashes, no topic", sim.ZMQShapeArray, ""},
		{"maps with a topic", sim.ZMQShapeMap, "kv@worker-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startZMQFleet(t, sim.ZMQConfig{Shape: tc.shape, Topic: tc.topic}, true)
			f.warmUp(t)
			f.workload(t, "w", 80)
			f.waitMirror(t)
			if st := f.status(); st.Gaps != 0 || st.Resets != 0 || st.Mode != workers.KVModeEvents || st.Removed == 0 {
				t.Errorf("status %+v: want no gaps or resets, events mode, and evictions seen", st)
			}
		})
	}
}

// TestZMQEventsLostBatchesReplayed: batches the PUB socket did not deliver
// are fetched from the replay socket before the subscription sees a gap;
// without a replay socket the same loss is a gap, and the mirror is reset.
func TestZMQEventsLostBatchesReplayed(t *testing.T) {
	t.Run("with replay", func(t *testing.T) {
		f := startZMQFleet(t, sim.ZMQConfig{SkipEvery: 3}, true)
		f.warmUp(t)
		f.workload(t, "w", 60)
		f.settle(t, 3)
		f.waitMirror(t)
		if st := f.status(); st.Gaps != 0 || st.Resets != 0 || st.Resyncs != 0 {
			t.Errorf("status %+v: the replay should have filled every hole", st)
		}
	})
	t.Run("without replay", func(t *testing.T) {
		f := startZMQFleet(t, sim.ZMQConfig{SkipEvery: 3}, false)
		f.warmUp(t)
		f.workload(t, "w", 30)
		testutil.Eventually(t, "a gap", func() bool { return f.status().Gaps > 0 })
		if log := f.mirror.log(f.w.URL()); !slices.Contains(log, "reset 0") {
			t.Errorf("handler calls %q: a gap must reset the mirror", log)
		}
	})
}

// TestZMQEventsPublisherRestart: an engine (and its publisher) killed and
// started again numbers from 0; the subscription notices the lost
// connection, resets the mirror once and follows the new process, whose
// first batches the replay recovers.
func TestZMQEventsPublisherRestart(t *testing.T) {
	f := startZMQFleet(t, sim.ZMQConfig{}, true)
	f.warmUp(t)
	f.workload(t, "before", 50)
	f.waitMirror(t)

	f.restart(t) // numbering from 0
	f.workload(t, "after", 50)
	f.until(t, "a batch of the restarted engine", func() bool { return f.status().Resets > 0 })
	f.waitMirror(t)
	if st := f.status(); st.Resets != 1 || st.Gaps != 0 || st.Mode != workers.KVModeEvents {
		t.Errorf("status after the restart %+v: want one reset, no gap, events mode", st)
	}
}

// TestZMQEventsHostilePublisher: a payload that is not msgpack resets the
// mirror and resubscribes (DATA_LOSS, as a malformed gRPC batch); a frame
// above the bound ends the connection before it is allocated; neither
// stops the subscription from following the engine afterwards.
func TestZMQEventsHostilePublisher(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault sim.ZMQFault
		want  string
	}{
		{"garbage", sim.ZMQGarbage, "not a valid vLLM KVEventBatch"},
		{"huge frame", sim.ZMQHuge, "above the bound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startZMQFleet(t, sim.ZMQConfig{}, false)
			f.warmUp(t)
			f.pub.CorruptNext(tc.fault)
			f.until(t, "the hostile batch to fail the stream", func() bool {
				return strings.Contains(f.status().LastError, tc.want)
			})
			if st := f.status(); st.Failures == 0 && st.Resyncs == 0 {
				t.Errorf("status %+v: want the stream failed", st)
			}
			before := f.status().Batches
			f.until(t, "batches after the hostile one", func() bool { return f.status().Batches > before })
		})
	}
}

// runKVSubscriptionsWith runs subscriptions of cfg over reg until the test
// ends.
func runKVSubscriptionsWith(t *testing.T, reg *workers.Registry, cfg workers.KVSubscriptionConfig) *workers.KVSubscriptions {
	t.Helper()
	subs, err := workers.NewKVSubscriptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- subs.Run(ctx, reg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	return subs
}

// TestZMQEventsPublisherConnects: a publisher configured to connect (vLLM
// with an endpoint naming a host) reaches a subscription that binds, and
// the mirror equals the engine's cache as with a publisher that binds; a
// publisher restart is followed as well. The restarted publisher connects
// again, and what it sends before the subscription has reached it is lost
// (a PUB socket drops it): its replay socket gives those first batches
// back, as vLLM's does.
func TestZMQEventsPublisherConnects(t *testing.T) {
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return "tcp://" + l.Addr().String()
	}
	ep, rep := free(), free() // a port for the subscription to bind, one for the replay socket
	srv, w := startZMQSim(t)
	src, err := workers.NewZMQEventSource(workers.ZMQEventConfig{Endpoint: ep, Bind: true, Replay: rep})
	if err != nil {
		t.Fatal(err)
	}
	f := &zmqFleet{srv: srv, w: w, mirror: newPageMirror()}
	f.subscribe(t, src)
	testutil.Eventually(t, "the subscription to bind", func() bool { return f.status().Connected })
	if f.pub, err = sim.StartZMQPublisher(srv, sim.ZMQConfig{Endpoint: ep, Connect: true, Replay: rep}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.pub.Close)
	f.warmUp(t)
	f.workload(t, "w", 60)
	f.waitMirror(t)

	f.restart(t)
	f.until(t, "a batch of the restarted engine", func() bool { return f.status().Resets > 0 })
	f.workload(t, "after", 30)
	f.settle(t, 0)
	f.waitMirror(t)
	if st := f.status(); st.Resets != 1 || st.Mode != workers.KVModeEvents {
		t.Errorf("status %+v: want one reset, events mode", st)
	}
}

// TestZMQEventsWorkerRemoved: removing the worker closes its ZMQ sockets
// (replay connections included) and ends every goroutine of its
// subscription, the ZMQ library's among them; no event reaches the handler
// after.
func TestZMQEventsWorkerRemoved(t *testing.T) {
	f := startZMQFleet(t, sim.ZMQConfig{SkipEvery: 2}, true)
	f.warmUp(t)
	f.workload(t, "w", 20)
	f.settle(t, 2)
	f.waitMirror(t)
	if kvGoroutines(t, f.w.URL()) == 0 {
		t.Fatal("no goroutine labelled with the worker's subscription")
	}
	if _, err := f.reg.Remove(f.w.URL()); err != nil {
		t.Fatal(err)
	}
	calls := len(f.mirror.log(f.w.URL()))
	testutil.Eventually(t, "the subscription's goroutines to end", func() bool { return kvGoroutines(t, f.w.URL()) == 0 })
	f.workload(t, "after", 10)
	if got := f.mirror.log(f.w.URL()); len(got) != calls {
		t.Errorf("handler calls after removal: %q", got[calls:])
	}
}

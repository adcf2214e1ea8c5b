package workers_test

// An engine restart the numbers alone do not show: the new process has
// numbered past the position the subscription resumes at before the
// subscription comes back (a crash loop while the backoff has grown, or a
// busy new process behind a slow reconnection). Resuming there would read
// the new process's batches as the old one's continuation, skip its first
// ones, and keep the old process's pages in the mirror for good.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestKVEventsRestartPastTheOldPosition: over both transports, the engine
// is killed while the subscription is held back (its reconnections wait at
// a gate), restarted, and made to publish more batches than the old process
// had before the subscription may reconnect. Afterwards the mirror holds
// none of the old process's pages and the new process's pages are there:
// all of them over ZMQ, whose replay socket gives the new process's first
// batches back; over gRPC, where a subscription from 0 starts "from now
// on", those first batches are lost, which the status counts as a gap.
func TestKVEventsRestartPastTheOldPosition(t *testing.T) {
	for _, tc := range []struct {
		name string
		zmq  bool
		// wantGaps: the new process's first batches cannot be replayed
		// (and the mirror cannot equal the engine's cache).
		wantGaps uint64
	}{
		{name: "ZMQ with a replay socket", zmq: true},
		{name: "gRPC", wantGaps: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, w := startZMQSim(t)
			f := &zmqFleet{srv: srv, w: w, mirror: newPageMirror()}
			var src workers.KVEventSource
			// The engine's own count: the ZMQ publisher numbers the same
			// batches, but learns of them a moment later.
			published := func() uint64 { return f.srv.Engine().Stats().KVNextSequence }
			if tc.zmq {
				var err error
				if f.pub, err = sim.StartZMQPublisher(srv, sim.ZMQConfig{Endpoint: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0"}, nil); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(f.pub.Close)
				if src, err = workers.NewZMQEventSource(workers.ZMQEventConfig{Endpoint: f.pub.Endpoint(), Replay: f.pub.ReplayEndpoint()}); err != nil {
					t.Fatal(err)
				}
			} else {
				src = w.Backend().(workers.KVEventSource)
			}
			gate := newKVGate(src)
			f.subscribe(t, gate)
			caughtUp := func() bool {
				n, st := published(), f.status()
				return n > 0 && st.HasLastSeq && st.LastSeq == n-1
			}

			f.warmUp(t)
			f.workload(t, "before", 20)
			testutil.Eventually(t, "the old process's batches all applied", caughtUp)
			old := f.mirror.hashes()
			oldNext := published()

			gate.close()
			var restarted <-chan struct{}
			if tc.zmq {
				_, restarted = f.pub.Published()
			}
			f.srv.Kill()
			testutil.Eventually(t, "the stream to break", func() bool { return f.status().Failures > 0 })
			if err := f.srv.Restart(); err != nil {
				t.Fatal(err)
			}
			if tc.zmq {
				f.reopened(t, restarted)
			}
			f.reconnected(t)
			f.until(t, "the new process to number past the old position", func() bool { return published() > oldNext+4 })
			gate.open()

			f.until(t, "the restart to be seen", func() bool { return f.status().Resets > 0 })
			resetAt := f.status().Batches
			f.until(t, "a batch after the fresh start", func() bool { return f.status().Batches > resetAt })
			f.workload(t, "after", 10)
			last := testutil.Tokens(60_000, 48)
			generate(t, w, "last", last)
			testutil.Eventually(t, "the last batch applied", caughtUp)

			if stale := f.mirror.hashesIn(old); len(stale) > 0 {
				t.Errorf("%d pages of the old process still mirrored, e.g. %d", len(stale), stale[0])
			}
			if !f.mirror.holds(last, 16) {
				t.Errorf("the last request's pages are not mirrored")
			}
			if tc.wantGaps == 0 {
				f.waitMirror(t)
			}
			if st := f.status(); st.Resets != 1 || st.Gaps != tc.wantGaps || st.Mode != workers.KVModeEvents {
				t.Errorf("status %+v: want one reset, %d gaps, events mode", st, tc.wantGaps)
			}
		})
	}
}

// kvGate holds every subscription to its source while closed: the router's
// reconnection comes late, at a moment the test chooses.
type kvGate struct {
	src  workers.KVEventSource
	mu   sync.Mutex
	gate chan struct{} // closed while the gate is open
}

func newKVGate(src workers.KVEventSource) *kvGate {
	g := &kvGate{src: src, gate: make(chan struct{})}
	close(g.gate)
	return g
}

func (g *kvGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate = make(chan struct{})
}

func (g *kvGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.gate)
}

func (g *kvGate) SubscribeKVEvents(ctx context.Context, start uint64) (workers.KVEventStream, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	select {
	case <-gate:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return g.src.SubscribeKVEvents(ctx, start)
}

// hashes is the block hashes of the pages mirrored now.
func (m *pageMirror) hashes() map[int64]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[int64]bool, len(m.pages))
	for h := range m.pages {
		out[h] = true
	}
	return out
}

// hashesIn is the mirrored pages' hashes that are in set, sorted.
func (m *pageMirror) hashesIn(set map[int64]bool) []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int64
	for h := range m.pages {
		if set[h] {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return out
}

// holds reports whether every whole page of prompt is a mirrored page.
func (m *pageMirror) holds(prompt []uint32, page int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	have := map[string]bool{}
	for _, p := range m.pages {
		have[fmt.Sprint(p.tokens)] = true
	}
	for i := 0; i+page <= len(prompt); i += page {
		if !have[fmt.Sprint(prompt[i:i+page])] {
			return false
		}
	}
	return true
}

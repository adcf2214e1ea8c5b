package waitq_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/waitq"
	"github.com/kvgate/kvgate/workers"
)

// engine describes one candidate for the saturation spec.
type engine struct {
	limit    int          // reported running-request limit (0: none)
	ours     int          // this router's requests in flight on it
	polled   workers.Load // the engine's own figures, as last polled
	ended    int          // requests of ours in flight at the poll that ended since
	sick     bool
	excluded bool
	// probes > 0: its circuit breaker is half-open with that many probe
	// places, of which probing are taken.
	probes, probing int
}

// none is an Avoid expectation of no engine.
var none = []int{}

func TestRoomSpec(t *testing.T) {
	for _, c := range []struct {
		name    string
		engines []engine
		pending int  // requests bound already, not yet placed
		queue   bool // Saturation.EngineQueue
		room    bool
		full    []int // indices Full reports (FullOf)
		// avoid: the indices Avoid reports, when not the same as full;
		// none for no index.
		avoid []int
	}{
		{name: "below its limit: room", engines: []engine{{limit: 2, ours: 1}}, room: true},
		{name: "at its limit: full", engines: []engine{{limit: 2, ours: 2}}, room: false, full: []int{0}, avoid: none},
		{name: "no limit reported: never full", engines: []engine{{ours: 500}}, room: true},
		{name: "one engine with room is enough", engines: []engine{{limit: 2, ours: 2}, {limit: 2, ours: 1}}, room: true, full: []int{0}},
		{name: "another client's requests count",
			engines: []engine{{limit: 4, ours: 1, polled: workers.Load{Running: 4}}}, room: false, full: []int{0}, avoid: none},
		{name: "an engine with a queue of its own is full, though few are ours",
			engines: []engine{{limit: 2, polled: workers.Load{Running: 2, Waiting: 3}}}, room: false, full: []int{0}, avoid: none},
		{name: "an unhealthy engine's room does not count",
			engines: []engine{{limit: 2, sick: true}, {limit: 2, ours: 2}}, room: false, full: []int{1}, avoid: none},
		{name: "an excluded engine's room does not count",
			engines: []engine{{limit: 2, excluded: true}, {limit: 2, ours: 2}}, room: false, full: []int{1}, avoid: none},
		{name: "nothing available: do not wait (placement says why)",
			engines: []engine{{limit: 2, sick: true}}, room: true},
		{name: "the one free place is taken by a request bound before, not yet placed",
			engines: []engine{{limit: 2, ours: 1}}, pending: 1, room: false},
		{name: "free places add up over engines",
			engines: []engine{{limit: 2, ours: 1}, {limit: 4, ours: 3}}, pending: 1, room: true},
		{name: "as many bound before as places free: wait",
			engines: []engine{{limit: 2, ours: 1}, {limit: 4, ours: 3}}, pending: 2, room: false},
		{name: "an engine over its limit frees no place for another",
			engines: []engine{{limit: 2, polled: workers.Load{Running: 2, Waiting: 3}}, {limit: 2, ours: 1}}, pending: 1, room: false, full: []int{0}},
		{name: "no limit reported: room whatever is pending",
			engines: []engine{{ours: 5}}, pending: 100, room: true},
		{name: "without EngineQueue, an engine queuing requests below its limit has room",
			engines: []engine{{limit: 256, polled: workers.Load{Running: 8, Waiting: 1}}}, room: true},
		{name: "an engine queuing requests of its own is full below its limit",
			engines: []engine{{limit: 256, polled: workers.Load{Running: 8, Waiting: 1}}}, queue: true, room: false, full: []int{0}, avoid: none},
		{name: "an engine queuing requests is full though it reports no limit",
			engines: []engine{{polled: workers.Load{Running: 8, Waiting: 1}}}, queue: true, room: false, full: []int{0}, avoid: none},
		{name: "a queue as many of our requests as ended since the poll have drained: room",
			engines: []engine{{limit: 256, ended: 2, polled: workers.Load{Running: 8, Waiting: 2}}}, queue: true, room: true},
		{name: "a queue longer than our requests ended since the poll: full",
			engines: []engine{{limit: 256, ended: 1, polled: workers.Load{Running: 8, Waiting: 2}}}, queue: true, room: false, full: []int{0}, avoid: none},
		{name: "an engine queuing requests frees no place for one bound before",
			engines: []engine{{limit: 256, polled: workers.Load{Running: 8, Waiting: 1}}, {limit: 2, ours: 1}}, queue: true, pending: 1, room: false, full: []int{0}},
		{name: "one engine without a queue is enough",
			engines: []engine{{limit: 256, polled: workers.Load{Running: 8, Waiting: 1}}, {limit: 256, ours: 3}}, queue: true, room: true, full: []int{0}},
		{name: "a half-open breaker lets one probe through, though the engine has more room",
			engines: []engine{{limit: 4, probes: 1}}, room: true},
		{name: "a half-open breaker's probe is the place of a request bound before",
			engines: []engine{{limit: 4, probes: 1}}, pending: 1, room: false},
		{name: "a half-open breaker with its probe taken has no place",
			engines: []engine{{limit: 4, probes: 1, probing: 1}, {limit: 2, ours: 2}}, room: false, full: []int{1}, avoid: none},
		{name: "a half-open breaker's probe counts for an engine without a limit",
			engines: []engine{{probes: 2, probing: 1}}, pending: 1, room: false},
		{name: "an engine that reported no load at all is unaffected",
			engines: []engine{{limit: 256, ours: 3}, {ours: 3}}, queue: true, room: true},
		{name: "every engine full, one by a poll only: only those our own requests fill are avoided",
			engines: []engine{{limit: 2, ours: 2}, {limit: 2, polled: workers.Load{Running: 2}}, {limit: 1, ours: 1}},
			room:    false, full: []int{0, 1, 2}, avoid: []int{0, 2}},
		{name: "every engine full by our own requests: none is avoided",
			engines: []engine{{limit: 1, ours: 1}, {limit: 2, ours: 2}}, room: false, full: []int{0, 1}, avoid: none},
		{name: "every available engine full by a poll only: none is avoided",
			engines: []engine{{limit: 2, sick: true}, {limit: 2, ours: 1, polled: workers.Load{Running: 2}}}, room: false, full: []int{1}, avoid: none},
	} {
		t.Run(c.name, func(t *testing.T) {
			var views []workers.View
			var excluded []string
			for i, e := range c.engines {
				w := workers.NewWorker(fmt.Sprintf("grpc://127.0.0.1:%d", 9000+i), workers.ProtocolSGLang,
					workers.RoleRegular, workers.ModelInfo{MaxRunningRequests: e.limit}, nil, nil)
				ended := make([]func(), e.ended)
				for i := range ended {
					ended[i] = w.Acquire()
				}
				w.SetEngineLoad(e.polled)
				for _, release := range ended {
					release()
				}
				for range e.ours {
					defer w.Acquire()()
				}
				w.SetHealthy(!e.sick)
				if e.probes > 0 {
					halfOpen(t, w, e.probes, e.probing)
				}
				if e.excluded {
					excluded = append(excluded, w.URL())
				}
				views = append(views, workers.ViewOf(w))
			}
			sat := waitq.Saturation{EngineQueue: c.queue}
			if got := sat.Room(views, excluded, c.pending); got != c.room {
				t.Errorf("Room = %v, want %v", got, c.room)
			}
			var want []string
			for _, i := range c.full {
				want = append(want, views[i].URL())
			}
			if got := sat.FullOf(nil, views, excluded); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("FullOf = %v, want %v", got, want)
			}
			if c.avoid != nil {
				want = nil
				for _, i := range c.avoid {
					want = append(want, views[i].URL())
				}
			}
			if got := sat.Avoid([]string{"grpc://before"}, views, excluded); fmt.Sprint(got) != fmt.Sprint(append([]string{"grpc://before"}, want...)) {
				t.Errorf("Avoid = %v, want %v after what dst held", got, want)
			}
		})
	}
}

// halfOpen turns w's breaker half-open with probes probe places, probing of
// them taken until the test ends.
func halfOpen(t *testing.T, w *workers.Worker, probes, probing int) {
	t.Helper()
	clock := testutil.NewClock(time.Unix(0, 0))
	b := w.Breaker()
	if err := b.Reconfigure(workers.BreakerConfig{FailureThreshold: 1, SuccessThreshold: 1, Timeout: time.Second,
		HalfOpenProbes: probes, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	done, _ := b.Acquire()
	done(workers.Failure)
	clock.Advance(time.Second)
	for range probing {
		done, ok := b.Acquire()
		if !ok {
			t.Fatal("no probe place")
		}
		t.Cleanup(func() { done(workers.Ignored) })
	}
	if s := b.State(); s != workers.BreakerHalfOpen {
		t.Fatalf("breaker %v, want half-open", s)
	}
}

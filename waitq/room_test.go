package waitq_test

import (
	"fmt"
	"testing"

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
}

func TestRoomSpec(t *testing.T) {
	for _, c := range []struct {
		name    string
		engines []engine
		pending int  // requests bound already, not yet placed
		queue   bool // Saturation.EngineQueue
		room    bool
		full    []int // indices Full reports (FullOf)
	}{
		{name: "below its limit: room", engines: []engine{{limit: 2, ours: 1}}, room: true},
		{name: "at its limit: full", engines: []engine{{limit: 2, ours: 2}}, room: false, full: []int{0}},
		{name: "no limit reported: never full", engines: []engine{{ours: 500}}, room: true},
		{name: "one engine with room is enough", engines: []engine{{limit: 2, ours: 2}, {limit: 2, ours: 1}}, room: true, full: []int{0}},
		{name: "another client's requests count",
			engines: []engine{{limit: 4, ours: 1, polled: workers.Load{Running: 4}}}, room: false, full: []int{0}},
		{name: "an engine with a queue of its own is full, though few are ours",
			engines: []engine{{limit: 2, polled: workers.Load{Running: 2, Waiting: 3}}}, room: false, full: []int{0}},
		{name: "an unhealthy engine's room does not count",
			engines: []engine{{limit: 2, sick: true}, {limit: 2, ours: 2}}, room: false, full: []int{1}},
		{name: "an excluded engine's room does not count",
			engines: []engine{{limit: 2, excluded: true}, {limit: 2, ours: 2}}, room: false, full: []int{1}},
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
			engines: []engine{{limit: 256, polled: workers.Load{Running: 8, Waiting: 1}}}, queue: true, room: false, full: []int{0}},
		{name: "an engine queuing requests is full though it reports no limit",
			engines: []engine{{polled: workers.Load{Running: 8, Waiting: 1}}}, queue: true, room: false, full: []int{0}},
		{name: "a queue as many of our requests as ended since the poll have drained: room",
			engines: []engine{{limit: 256, ended: 2, polled: workers.Load{Running: 8, Waiting: 2}}}, queue: true, room: true},
		{name: "a queue longer than our requests ended since the poll: full",
			engines: []engine{{limit: 256, ended: 1, polled: workers.Load{Running: 8, Waiting: 2}}}, queue: true, room: false, full: []int{0}},
		{name: "an engine queuing requests frees no place for one bound before",
			engines: []engine{{limit: 256, polled: workers.Load{Running: 8, Waiting: 1}}, {limit: 2, ours: 1}}, queue: true, pending: 1, room: false, full: []int{0}},
		{name: "one engine without a queue is enough",
			engines: []engine{{limit: 256, polled: workers.Load{Running: 8, Waiting: 1}}, {limit: 256, ours: 3}}, queue: true, room: true, full: []int{0}},
		{name: "an engine that reported no load at all is unaffected",
			engines: []engine{{limit: 256, ours: 3}, {ours: 3}}, queue: true, room: true},
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
		})
	}
}

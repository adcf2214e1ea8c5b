package waitq_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/waitq"
)

// step is one thing that happens to a queue in a spec below.
type step struct {
	arrive string          // a request of this name starts waiting (with ticket)
	ticket waitq.Ticket    // its ticket (Model "m" unless set)
	free   int             // places that free up (then wake, unless noWake)
	noWake bool            // the places free silently
	cancel string          // this request's client gives up
	after  time.Duration   // time passes
	stuck  map[string]bool // requests whose own room never opens
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestQueueSpec(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, c := range []struct {
		name  string
		size  int
		steps []step
		// bound is the order requests got their place; outcome the end of
		// every other one ("waiting", or the start of its error).
		bound   string
		outcome map[string]string
	}{
		{name: "room at once: no wait", size: 4,
			steps: []step{{free: 1}, {arrive: "a"}},
			bound: "a"},
		{name: "no room: waits until a place frees and it is woken", size: 4,
			steps: []step{{arrive: "a"}, {free: 1}},
			bound: "a"},
		{name: "a place freed without a wake is not taken until the next wake", size: 4,
			steps:   []step{{arrive: "a"}, {free: 1, noWake: true}},
			outcome: map[string]string{"a": "waiting"}},
		{name: "arrival order within a class and without deadlines", size: 4,
			steps: []step{{arrive: "a", ticket: waitq.Ticket{Arrived: at(1)}}, {arrive: "b", ticket: waitq.Ticket{Arrived: at(2)}},
				{arrive: "c", ticket: waitq.Ticket{Arrived: at(3)}}, {free: 1}, {free: 1}, {free: 1}},
			bound: "a b c"},
		{name: "lower priority value first, whatever the arrival", size: 4,
			steps: []step{{arrive: "low", ticket: waitq.Ticket{Priority: 5, Arrived: at(1)}},
				{arrive: "high", ticket: waitq.Ticket{Priority: -1, Arrived: at(2)}},
				{arrive: "mid", ticket: waitq.Ticket{Priority: 0, Arrived: at(3)}}, {free: 3}},
			bound: "high mid low"},
		{name: "earlier deadline first; no deadline last", size: 4,
			steps: []step{{arrive: "none", ticket: waitq.Ticket{Arrived: at(1)}},
				{arrive: "late", ticket: waitq.Ticket{Deadline: at(60), Arrived: at(2)}},
				{arrive: "soon", ticket: waitq.Ticket{Deadline: at(10), Arrived: at(3)}}, {free: 3}},
			bound: "soon late none"},
		{name: "a newcomer never overtakes the head of its lane", size: 4,
			steps:   []step{{arrive: "a"}, {free: 1, noWake: true}, {arrive: "b"}},
			outcome: map[string]string{"a": "waiting", "b": "waiting"}},
		{name: "models wait in lanes of their own", size: 4,
			steps: []step{{arrive: "a", ticket: waitq.Ticket{Model: "x"}, stuck: map[string]bool{"a": true}},
				{arrive: "b", ticket: waitq.Ticket{Model: "y"}}, {free: 1}},
			bound:   "b",
			outcome: map[string]string{"a": "waiting"}},
		{name: "the queue is bounded: beyond Size, refused at once naming --queue-size", size: 2,
			steps:   []step{{arrive: "a"}, {arrive: "b"}, {arrive: "c"}},
			outcome: map[string]string{"a": "waiting", "b": "waiting", "c": "busy: --queue-size"}},
		{name: "Size 0: nobody waits", size: 0,
			steps:   []step{{arrive: "a"}},
			outcome: map[string]string{"a": "busy: --queue-size"}},
		{name: "a wait ends at the timeout naming --queue-timeout-secs", size: 4,
			steps:   []step{{arrive: "a"}, {after: 29 * time.Second}, {arrive: "b"}, {after: time.Second}},
			outcome: map[string]string{"a": "busy: --queue-timeout-secs", "b": "waiting"}},
		{name: "a timed-out head wakes the next, which takes the room it could not", size: 4,
			steps: []step{{arrive: "a", stuck: map[string]bool{"a": true}}, {after: 10 * time.Second}, {free: 1}, {arrive: "b"},
				{after: 20 * time.Second}},
			bound:   "b",
			outcome: map[string]string{"a": "busy: --queue-timeout-secs"}},
		{name: "a cancelled head wakes the next", size: 4,
			steps:   []step{{arrive: "a", stuck: map[string]bool{"a": true}}, {free: 1}, {arrive: "b"}, {cancel: "a"}},
			bound:   "b",
			outcome: map[string]string{"a": "canceled"}},
		{name: "a cancelled waiter frees its place in the bound", size: 1,
			steps:   []step{{arrive: "a"}, {cancel: "a"}, {arrive: "b"}, {free: 1}},
			bound:   "b",
			outcome: map[string]string{"a": "canceled"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex // guards free, stuck, bound, outcome
				free, stuck := 0, map[string]bool{}
				var bound []string
				outcome := map[string]string{}
				q := waitq.New(waitq.Config{Size: c.size, Timeout: 30 * time.Second})
				cancels := map[string]context.CancelFunc{}
				var wg sync.WaitGroup
				for _, s := range c.steps {
					mu.Lock()
					free += s.free
					for n := range s.stuck {
						stuck[n] = true
					}
					mu.Unlock()
					switch {
					case s.arrive != "":
						name, tk := s.arrive, s.ticket
						if tk.Model == "" {
							tk.Model = "m"
						}
						ctx, cancel := context.WithCancel(t.Context())
						cancels[name] = cancel
						mu.Lock()
						outcome[name] = "waiting"
						mu.Unlock()
						wg.Go(func() {
							err := q.Wait(ctx, tk, func() bool {
								mu.Lock()
								defer mu.Unlock()
								if stuck[name] || free == 0 {
									return false
								}
								free--
								return true
							})
							mu.Lock()
							defer mu.Unlock()
							outcome[name] = describe(err)
							if err == nil {
								bound = append(bound, name)
							}
						})
					case s.free > 0 && !s.noWake:
						q.WakeAll()
					case s.cancel != "":
						cancels[s.cancel]()
					case s.after > 0:
						time.Sleep(s.after) // the bubble's clock: no real time passes
					}
					synctest.Wait()
				}
				mu.Lock()
				if got := strings.Join(bound, " "); got != c.bound {
					t.Errorf("bound in order %q, want %q", got, c.bound)
				}
				waiting := 0
				for name, got := range outcome {
					want := c.outcome[name]
					if want == "" {
						want = "bound"
					}
					if got == "waiting" {
						waiting++
					}
					if got != want {
						t.Errorf("%s: %s, want %s", name, got, want)
					}
				}
				mu.Unlock()
				if got := q.Waiting(); got != waiting {
					t.Errorf("Waiting() = %d, want %d", got, waiting)
				}
				// Nobody is left behind: every waiter leaves when its client
				// does (synctest fails the test on a goroutine still blocked).
				for _, cancel := range cancels {
					cancel()
				}
				wg.Wait()
				if got := q.Waiting(); got != 0 {
					t.Errorf("after every client left, Waiting() = %d", got)
				}
			})
		})
	}
}

// describe names a Wait's outcome for the spec.
func describe(err error) string {
	switch {
	case err == nil:
		return "bound"
	case err == context.Canceled:
		return "canceled"
	}
	if k, _ := fault.KindOf(err); k == fault.Busy {
		for _, flag := range []string{"--queue-size", "--queue-timeout-secs"} {
			if strings.Contains(err.Error(), flag) {
				return "busy: " + flag
			}
		}
	}
	return "error: " + err.Error()
}

// TestWaitingPerModelIsReported checks the Changed hook that feeds the
// per-model gauge.
func TestWaitingPerModelIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		seen := map[string]int{}
		q := waitq.New(waitq.Config{Size: 4, Timeout: time.Minute, Changed: func(m string, n int) {
			mu.Lock()
			seen[m] = n
			mu.Unlock()
		}})
		ctx, cancel := context.WithCancel(t.Context())
		never := func() bool { return false }
		for range 2 {
			go func() { _ = q.Wait(ctx, waitq.Ticket{Model: "x"}, never) }()
		}
		go func() { _ = q.Wait(ctx, waitq.Ticket{Model: "y"}, never) }()
		synctest.Wait()
		mu.Lock()
		if seen["x"] != 2 || seen["y"] != 1 {
			t.Errorf("waiting per model = %v, want x:2 y:1", seen)
		}
		mu.Unlock()
		if q.WaitingFor("x") != 2 || q.Waiting() != 3 {
			t.Errorf("WaitingFor(x) = %d, Waiting() = %d; want 2, 3", q.WaitingFor("x"), q.Waiting())
		}
		cancel()
		synctest.Wait()
		if seen["x"] != 0 || seen["y"] != 0 {
			t.Errorf("after cancel, waiting per model = %v, want zeros", seen)
		}
	})
}

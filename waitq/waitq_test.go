package waitq_test

import (
	"context"
	"slices"
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
		// pick, window and maxPasses are the queue's Config.Pick (given
		// each waiter's name as its Ref), Window and MaxPasses.
		pick              func(window []waitq.Ticket) int
		window, maxPasses int
		// passed is, for requests named, how many times their Report
		// says they were passed over.
		passed map[string]int
		// anyOrder: requests bound in one turn may return in any order,
		// so bound is compared as a set.
		anyOrder bool
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

		// Pick (late binding's matching) chooses who in the head's window
		// gets the room; these pick the last of the window, the most
		// hostile choice for the head.
		{name: "pick: room goes to the waiter Pick chooses in the window", size: 8, pick: pickLast, window: 2, maxPasses: 4,
			steps:   []step{{arrive: "a", ticket: waitq.Ticket{Arrived: at(1)}}, {arrive: "b", ticket: waitq.Ticket{Arrived: at(2)}}, {arrive: "c", ticket: waitq.Ticket{Arrived: at(3)}}, {free: 1}},
			bound:   "b",
			outcome: map[string]string{"a": "waiting", "c": "waiting"},
			passed:  map[string]int{"a": 1, "c": 0}},
		{name: "pick: a waiter never chosen is bound once passed over MaxPasses times", size: 8, pick: pickLast, window: 8, maxPasses: 2,
			steps: []step{{arrive: "a", ticket: waitq.Ticket{Arrived: at(1)}}, {arrive: "b", ticket: waitq.Ticket{Arrived: at(2)}},
				{arrive: "c", ticket: waitq.Ticket{Arrived: at(3)}}, {arrive: "d", ticket: waitq.Ticket{Arrived: at(4)}},
				{free: 1}, {free: 1}, {free: 1}, {free: 1}},
			bound:  "d c a b",
			passed: map[string]int{"a": 2, "b": 2, "c": 1, "d": 0}},
		{name: "pick: passes are bounded for newcomers too", size: 8, pick: pickLast, window: 8, maxPasses: 1,
			steps: []step{{arrive: "a", ticket: waitq.Ticket{Arrived: at(1)}}, {arrive: "b", ticket: waitq.Ticket{Arrived: at(2)}}, {free: 1},
				{arrive: "c", ticket: waitq.Ticket{Arrived: at(3)}}, {free: 1}, {free: 1}},
			bound:  "b a c",
			passed: map[string]int{"a": 1}},
		{name: "pick: never a lower class before a higher one", size: 8, pick: pickLast, window: 8, maxPasses: 8,
			steps: []step{{arrive: "lo1", ticket: waitq.Ticket{Priority: 1, Arrived: at(1)}}, {arrive: "hi", ticket: waitq.Ticket{Priority: -1, Arrived: at(2)}},
				{arrive: "lo2", ticket: waitq.Ticket{Priority: 1, Arrived: at(3)}}, {free: 1}, {free: 1}, {free: 1}},
			bound:  "hi lo2 lo1",
			passed: map[string]int{"hi": 0, "lo1": 1}},
		{name: "pick: the head offers every free place in one turn", size: 8, pick: pickLast, window: 8, maxPasses: 8,
			steps: []step{{arrive: "a", ticket: waitq.Ticket{Arrived: at(1)}}, {arrive: "b", ticket: waitq.Ticket{Arrived: at(2)}},
				{arrive: "c", ticket: waitq.Ticket{Arrived: at(3)}}, {free: 2}},
			bound: "b c", anyOrder: true,
			outcome: map[string]string{"a": "waiting"}},
		{name: "pick: a waiter passed over still times out at its own time", size: 8, pick: pickLast, window: 8, maxPasses: 8,
			steps: []step{{arrive: "a", ticket: waitq.Ticket{Arrived: at(1)}}, {after: 10 * time.Second}, {arrive: "b", ticket: waitq.Ticket{Arrived: at(2)}},
				{free: 1}, {after: 20 * time.Second}},
			bound:   "b",
			outcome: map[string]string{"a": "busy: --queue-timeout-secs"},
			passed:  map[string]int{"a": 1}},
		{name: "pick: when the chosen waiter's room does not open, nobody is bound", size: 8, pick: pickFirst, window: 8, maxPasses: 8,
			steps:   []step{{arrive: "a", stuck: map[string]bool{"a": true}}, {arrive: "b"}, {free: 1}},
			outcome: map[string]string{"a": "waiting", "b": "waiting"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex // guards free, stuck, bound, outcome
				free, stuck := 0, map[string]bool{}
				var bound []string
				outcome := map[string]string{}
				cfg := waitq.Config{Size: c.size, Timeout: 30 * time.Second, Window: c.window, MaxPasses: c.maxPasses}
				if c.pick != nil {
					cfg.Pick = func(_ string, w []waitq.Ticket) int { return c.pick(w) }
				}
				q := waitq.New(cfg)
				reports := map[string]*waitq.Report{}
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
						tk.Ref, tk.Report = name, &waitq.Report{}
						reports[name] = tk.Report
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
				if c.anyOrder {
					slices.Sort(bound)
				}
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
				for name, want := range c.passed {
					if got := reports[name].Passed; got != want {
						t.Errorf("%s was passed over %d times, want %d", name, got, want)
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

// pickLast and pickFirst are Config.Picks: the last of the window, and
// its head.
func pickLast(w []waitq.Ticket) int { return len(w) - 1 }
func pickFirst([]waitq.Ticket) int  { return 0 }

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

// TestGrantedAsItsClientLeaves: the head grants room to a waiter behind it
// (Config.Pick) in the same moment that waiter's client gives up. Whichever
// comes first, a request that took a place is bound, and one that was
// refused took none: the places taken equal the requests bound.
func TestGrantedAsItsClientLeaves(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			free, taken := 0, 0
			room := func() bool {
				mu.Lock()
				defer mu.Unlock()
				if free == 0 {
					return false
				}
				free--
				taken++
				return true
			}
			q := waitq.New(waitq.Config{Size: 4, Timeout: time.Minute, Window: 2, MaxPasses: 4,
				Pick: func(string, []waitq.Ticket) int { return 1 }})
			bound := 0
			results := make(chan error, 2)
			aCtx, cancelA := context.WithCancel(t.Context())
			defer cancelA()
			bCtx, cancelB := context.WithCancel(t.Context())
			go func() { results <- q.Wait(aCtx, waitq.Ticket{Model: "m", Arrived: t0}, room) }()
			synctest.Wait()
			go func() { results <- q.Wait(bCtx, waitq.Ticket{Model: "m", Arrived: t0.Add(time.Second)}, room) }()
			synctest.Wait()
			mu.Lock()
			free = 1
			mu.Unlock()
			q.WakeAll()
			cancelB() // b's client leaves as the head grants it the place
			synctest.Wait()
			cancelA()
			for range 2 {
				if err := <-results; err == nil {
					bound++
				}
			}
			if bound != taken || taken != 1 {
				t.Errorf("%d bound, %d places taken; want 1 and 1", bound, taken)
			}
			if q.Waiting() != 0 {
				t.Errorf("Waiting() = %d after both left", q.Waiting())
			}
		})
	}
}

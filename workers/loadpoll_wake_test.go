package workers_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvgate/kvgate/workers"
)

// TestLoadPollsWakeWhenRequestsStartWaiting: the poller's wait, chosen
// while nobody waited, is an interval (here an hour) long; when requests
// start waiting (LoadPollHooks.Wake) the quicker interval takes effect at
// once, counted from the last round's start, not after the hour.
func TestLoadPollsWakeWhenRequestsStartWaiting(t *testing.T) {
	busyEvery := workers.BusyLoadPollInterval
	for _, tc := range []struct {
		name string
		// idle is how long after the first round requests start waiting.
		idle time.Duration
		// want is when the next round begins after the first.
		want time.Duration
	}{
		{"long after the last round: a round at once", 10 * time.Minute, 10 * time.Minute},
		{"soon after the last round: the rest of the quick interval", busyEvery / 4, busyEvery},
		{"exactly the quick interval after it", busyEvery, busyEvery},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var busy atomic.Bool
				wake := make(chan struct{}, 1)
				rounds := make(chan time.Time, 16)
				hooks := workers.LoadPollHooks{Busy: busy.Load, Wake: wake, Polled: func() { rounds <- time.Now() }}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() {
					defer close(done)
					workers.RunLoadPollsWith(ctx, workers.NewRegistry(), time.Hour, hooks, nil)
				}()
				defer func() { cancel(); <-done }()

				first := <-rounds
				time.Sleep(tc.idle)
				synctest.Wait()
				if len(rounds) != 0 {
					t.Fatalf("a round %v after the first while idle with an interval of an hour", tc.idle)
				}
				busy.Store(true)
				wake <- struct{}{}
				if got := (<-rounds).Sub(first); got != tc.want {
					t.Errorf("the round after requests started waiting began %v after the first, want %v", got, tc.want)
				}
				prev := time.Now()
				if got := (<-rounds).Sub(prev); got != busyEvery {
					t.Errorf("while busy, rounds %v apart, want %v", got, busyEvery)
				}
				// The poller chooses its next wait after Polled returns:
				// let it choose while still busy.
				synctest.Wait()
				busy.Store(false)
				prev = time.Now()
				if got := (<-rounds).Sub(prev); got != busyEvery {
					t.Errorf("the wait chosen while busy lasted %v, want %v", got, busyEvery)
				}
				prev = time.Now()
				if got := (<-rounds).Sub(prev); got != time.Hour {
					t.Errorf("idle again, rounds %v apart, want the hour", got)
				}
			})
		})
	}
}

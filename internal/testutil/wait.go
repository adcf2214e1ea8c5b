package testutil

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Patience is how long the waiting helpers wait before they fail a test.
// It is generous on purpose: a condition that holds returns at once, and
// background work (KV event subscriptions, health checks, informers) can
// wait seconds for a core when CI runs every package's tests at once on a
// small machine. It bounds a hung test; it is never a speed assertion.
const Patience = 20 * time.Second

// firstPoll and lastPoll bound the pause between two reads of a
// condition: it starts short, so that a condition that comes true soon
// costs the test a millisecond, and doubles up to lastPoll, so that a long
// wait (a tokenizer loading) does not take the cores it waits for.
const (
	firstPoll = time.Millisecond
	lastPoll  = 20 * time.Millisecond
)

// Eventually fails t unless cond holds within Patience. It is for
// conditions nothing signals (a metric, a view kept by another goroutine);
// where the code under test can close a channel, wait on that instead.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyState(t, Patience, what, func() (bool, string) { return cond(), "" })
}

// EventuallyState fails t unless cond holds within the given time. cond
// also says what it saw; the failure reports the last of it, so that a
// timeout tells what the state was instead of only that it was wrong.
func EventuallyState(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if ok, seen := poll(within, cond); !ok {
		if seen != "" {
			t.Fatalf("timed out after %v waiting for %s; last seen: %s", within, what, seen)
		}
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// poll reads cond until it holds or within has passed, and returns whether
// it held and what it said last.
func poll(within time.Duration, cond func() (bool, string)) (bool, string) {
	ok, seen := cond()
	if ok {
		return true, seen
	}
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	pause := time.NewTimer(firstPoll)
	defer pause.Stop()
	for next := firstPoll; ; next = min(2*next, lastPoll) {
		select {
		case <-deadline.C:
			ok, seen = cond()
			return ok, seen
		case <-pause.C:
			if ok, seen = cond(); ok {
				return true, seen
			}
			pause.Reset(next)
		}
	}
}

// Receive waits, up to Patience, for a value on ch (or for ch to be
// closed, which yields the zero value) and returns it; otherwise it fails
// t naming what it waited for.
func Receive[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(Patience)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", Patience, what)
		panic("unreachable")
	}
}

// NoLeaks checks, when t ends, that every goroutine started since the call
// has ended. Call it before starting what the test runs, so that its check
// runs after their cleanups (cleanups run last-registered first).
//
// Goroutines are told apart by identity (go.uber.org/goleak), not counted:
// a leaked goroutine cannot hide behind one that ended, and the failure
// shows the stacks of the ones left. Goroutines on their way out get up to
// Patience to end. A test using NoLeaks must not run in parallel with
// others, whose goroutines would look leaked.
func NoLeaks(t testing.TB) {
	t.Helper()
	existing := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		var err error
		ok, _ := poll(Patience, func() (bool, string) {
			err = goleak.Find(existing)
			return err == nil, ""
		})
		if !ok {
			t.Errorf("goroutines leaked: %v", err)
		}
	})
}

// Never fails t if cond holds at any time during the window d. It is for
// the few contracts that are themselves a span of time (a leg must not be
// aborted while the coordinator waits up to a configured duration for it);
// wherever the code under test can signal that it decided, wait on the
// signal instead and assert once.
func Never(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	if ok, _ := poll(d, func() (bool, string) { return cond(), "" }); ok {
		t.Fatalf("%s", what)
	}
}

package workers_test

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
)

func newBreaker(t *testing.T, clock *testutil.Clock, changes *[]string) *workers.Breaker {
	t.Helper()
	cfg := workers.DefaultBreakerConfig()
	cfg.FailureThreshold, cfg.SuccessThreshold, cfg.Timeout = 3, 2, time.Minute
	cfg.Now = clock.Now
	cfg.OnChange = func(name string, from, to workers.BreakerState) {
		*changes = append(*changes, fmt.Sprintf("%s %v->%v", name, from, to))
	}
	b, err := workers.NewBreaker("w", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBreakerConfigValidate(t *testing.T) {
	valid := workers.DefaultBreakerConfig()
	tests := []struct {
		name    string
		edit    func(*workers.BreakerConfig)
		wantErr bool
	}{
		{"defaults", func(*workers.BreakerConfig) {}, false},
		{"disabled ignores the rest", func(c *workers.BreakerConfig) { *c = workers.BreakerConfig{} }, false},
		{"negative failure threshold", func(c *workers.BreakerConfig) { c.FailureThreshold = -1 }, true},
		{"zero success threshold", func(c *workers.BreakerConfig) { c.SuccessThreshold = 0 }, true},
		{"zero timeout", func(c *workers.BreakerConfig) { c.Timeout = 0 }, true},
		{"zero probes", func(c *workers.BreakerConfig) { c.HalfOpenProbes = 0 }, true},
	}
	for _, tt := range tests {
		c := valid
		tt.edit(&c)
		if err := c.Validate(); (err != nil) != tt.wantErr {
			t.Errorf("%s: Validate() = %v, want error %v", tt.name, err, tt.wantErr)
		}
	}
}

// TestBreakerLifecycle walks one breaker (3 failures open it for a minute, 2
// probe successes close it, one probe at a time) through every transition.
func TestBreakerLifecycle(t *testing.T) {
	clock := testutil.NewClock(time.Unix(1000, 0))
	var changes []string
	b := newBreaker(t, clock, &changes)

	attempt := func(o workers.Verdict) bool {
		done, ok := b.Acquire()
		if ok {
			done(o)
		}
		return ok
	}
	steps := []struct {
		name      string
		do        func() bool // the attempt's admission, where there is one
		wantOK    bool
		wantState workers.BreakerState
		wantAllow bool
	}{
		{"a failure counts", func() bool { return attempt(workers.Failure) }, true, workers.BreakerClosed, true},
		{"a success resets the count", func() bool { return attempt(workers.Success) }, true, workers.BreakerClosed, true},
		{"failure 1 of 3", func() bool { return attempt(workers.Failure) }, true, workers.BreakerClosed, true},
		{"failure 2 of 3", func() bool { return attempt(workers.Failure) }, true, workers.BreakerClosed, true},
		{"ignored outcomes do not count", func() bool { return attempt(workers.Ignored) }, true, workers.BreakerClosed, true},
		{"failure 3 of 3 opens", func() bool { return attempt(workers.Failure) }, true, workers.BreakerOpen, false},
		{"open refuses", func() bool { return attempt(workers.Success) }, false, workers.BreakerOpen, false},
		{"still open just before the timeout", func() bool { clock.Advance(time.Minute - time.Nanosecond); return attempt(workers.Success) }, false, workers.BreakerOpen, false},
		{"half-open at the timeout: probe 1 succeeds", func() bool { clock.Advance(time.Nanosecond); return attempt(workers.Success) }, true, workers.BreakerHalfOpen, true},
		{"a failed probe re-opens", func() bool { return attempt(workers.Failure) }, true, workers.BreakerOpen, false},
		{"with a new timeout", func() bool { clock.Advance(time.Minute / 2); return attempt(workers.Success) }, false, workers.BreakerOpen, false},
		{"half-open again: probe 1 succeeds", func() bool { clock.Advance(time.Minute / 2); return attempt(workers.Success) }, true, workers.BreakerHalfOpen, true},
		{"probe 2 succeeds and closes", func() bool { return attempt(workers.Success) }, true, workers.BreakerClosed, true},
		{"closed starts counting afresh", func() bool { return attempt(workers.Failure) }, true, workers.BreakerClosed, true},
	}
	for _, s := range steps {
		if ok := s.do(); ok != s.wantOK {
			t.Fatalf("%s: admitted %v, want %v", s.name, ok, s.wantOK)
		}
		if st := b.State(); st != s.wantState {
			t.Fatalf("%s: state %v, want %v", s.name, st, s.wantState)
		}
		if a := b.Allow(); a != s.wantAllow {
			t.Fatalf("%s: Allow() = %v, want %v", s.name, a, s.wantAllow)
		}
	}
	want := []string{"w closed->open", "w open->half_open", "w half_open->open", "w open->half_open", "w half_open->closed"}
	if fmt.Sprint(changes) != fmt.Sprint(want) {
		t.Errorf("OnChange calls %q, want %q", changes, want)
	}
}

// TestBreakerHalfOpenProbeLimit: a half-open breaker admits one probe at a
// time; Allow does not take the slot; an ignored probe frees it.
func TestBreakerHalfOpenProbeLimit(t *testing.T) {
	clock := testutil.NewClock(time.Unix(1000, 0))
	var changes []string
	b := newBreaker(t, clock, &changes)
	for range 3 {
		done, _ := b.Acquire()
		done(workers.Failure)
	}
	clock.Advance(time.Minute)

	if !b.Allow() || !b.Allow() {
		t.Fatal("Allow refused a half-open breaker with a free probe slot, or took it")
	}
	probe, ok := b.Acquire()
	if !ok {
		t.Fatal("first probe refused")
	}
	if b.Allow() {
		t.Error("Allow() with the probe slot taken")
	}
	if _, ok := b.Acquire(); ok {
		t.Error("second concurrent probe admitted")
	}
	probe(workers.Ignored)
	probe(workers.Failure) // done is idempotent: this must not re-open
	if st := b.State(); st != workers.BreakerHalfOpen {
		t.Fatalf("state %v after an ignored probe", st)
	}
	if _, ok := b.Acquire(); !ok {
		t.Error("probe slot not freed by an ignored outcome")
	}
}

// TestBreakerStaleOutcomes: outcomes of attempts admitted before a state
// change do not count after it.
func TestBreakerStaleOutcomes(t *testing.T) {
	clock := testutil.NewClock(time.Unix(1000, 0))
	var changes []string
	b := newBreaker(t, clock, &changes)

	slow, _ := b.Acquire() // admitted while closed, fails late
	for range 3 {
		done, _ := b.Acquire()
		done(workers.Failure)
	}
	clock.Advance(time.Minute)
	probe, ok := b.Acquire()
	if !ok {
		t.Fatal("probe refused")
	}
	slow(workers.Failure)
	if st := b.State(); st != workers.BreakerHalfOpen {
		t.Fatalf("a stale failure moved the breaker to %v", st)
	}
	probe(workers.Success)
	if st := b.State(); st != workers.BreakerHalfOpen {
		t.Fatalf("state %v after 1 of 2 probe successes", st)
	}
}

func TestBreakerDisabled(t *testing.T) {
	b, err := workers.NewBreaker("w", workers.BreakerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		done, ok := b.Acquire()
		if !ok {
			t.Fatal("a disabled breaker refused")
		}
		done(workers.Failure)
	}
	if b.State() != workers.BreakerClosed || !b.Allow() {
		t.Errorf("disabled breaker: state %v, allow %v", b.State(), b.Allow())
	}
}

// TestBreakerConcurrent runs attempts from many goroutines under -race while
// the clock moves, then checks the breaker still recovers: successes alone
// close it.
func TestBreakerConcurrent(t *testing.T) {
	clock := testutil.NewClock(time.Unix(1000, 0))
	b, err := workers.NewBreaker("w", workers.BreakerConfig{FailureThreshold: 5, SuccessThreshold: 3, Timeout: time.Second, HalfOpenProbes: 1, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				if i%50 == 0 {
					clock.Advance(time.Second)
				}
				_ = b.Allow()
				if done, ok := b.Acquire(); ok {
					done(map[bool]workers.Verdict{true: workers.Failure, false: workers.Success}[(g+i)%3 == 0])
				}
			}
		})
	}
	wg.Wait()

	clock.Advance(time.Second)
	for range 3 {
		done, ok := b.Acquire()
		if !ok {
			t.Fatalf("refused in state %v", b.State())
		}
		done(workers.Success)
	}
	if st := b.State(); st != workers.BreakerClosed {
		t.Errorf("state %v after recovery", st)
	}
}

// TestBreakerProbeRace: of many goroutines racing for a half-open breaker's
// probe slot, exactly HalfOpenProbes win.
func TestBreakerProbeRace(t *testing.T) {
	for _, limit := range []int{1, 2} {
		clock := testutil.NewClock(time.Unix(1000, 0))
		b, err := workers.NewBreaker("w", workers.BreakerConfig{FailureThreshold: 1, SuccessThreshold: 5, Timeout: time.Second, HalfOpenProbes: limit, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		done, _ := b.Acquire()
		done(workers.Failure)
		clock.Advance(time.Second)

		var mu sync.Mutex
		var won []func(workers.Verdict)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				if done, ok := b.Acquire(); ok {
					mu.Lock()
					won = append(won, done)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(won) != limit {
			t.Errorf("HalfOpenProbes %d: %d probes admitted", limit, len(won))
		}
		for _, done := range won {
			done(workers.Success)
		}
	}
}

// TestBreakerAnnouncesItsTimeout: with the real clock, an open breaker
// turns half-open and tells OnChange when its timeout passes, though
// nothing asks it: requests waiting in the router for room are woken by
// that call, not by asking. A probe that fails opens it for a new timeout,
// announced in turn. (Inside the bubble the clock moves only while every
// goroutine waits, so each announcement's time is exact.)
func TestBreakerAnnouncesItsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type change struct {
			what string
			at   time.Time
		}
		changes := make(chan change, 8)
		cfg := workers.BreakerConfig{FailureThreshold: 1, SuccessThreshold: 1, Timeout: time.Minute, HalfOpenProbes: 1,
			OnChange: func(_ string, from, to workers.BreakerState) {
				changes <- change{fmt.Sprintf("%v->%v", from, to), time.Now()}
			}}
		b, err := workers.NewBreaker("w", cfg)
		if err != nil {
			t.Fatal(err)
		}
		fail := func() {
			done, ok := b.Acquire()
			if !ok {
				t.Fatal("Acquire refused")
			}
			done(workers.Failure)
		}
		// halfOpenAfter wants the next change to be open->half_open, told
		// one timeout after the failure.
		halfOpenAfter := func(failed time.Time) {
			t.Helper()
			c := <-changes
			if c.what != "open->half_open" || c.at.Sub(failed) != time.Minute {
				t.Fatalf("told %s %v after the failure, want open->half_open %v after", c.what, c.at.Sub(failed), time.Minute)
			}
		}

		failed := time.Now()
		fail()
		if c := <-changes; c.what != "closed->open" {
			t.Fatalf("told %s first, want closed->open", c.what)
		}
		halfOpenAfter(failed)

		// The probe fails: open again, for a new timeout.
		failed = time.Now()
		fail()
		if c := <-changes; c.what != "half_open->open" {
			t.Fatalf("told %s after the failed probe, want half_open->open", c.what)
		}
		halfOpenAfter(failed)
		synctest.Wait()
		if len(changes) != 0 {
			t.Errorf("%d more changes told, want none", len(changes))
		}
	})
}

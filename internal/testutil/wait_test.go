package testutil

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// outcome is what a helper did to the test it was given: a testing.TB
// that records failures instead of failing the real test.
type outcome struct {
	testing.TB
	mu       sync.Mutex
	failures []string
	cleanups []func()
}

func (o *outcome) Helper() {}

func (o *outcome) Errorf(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failures = append(o.failures, fmt.Sprintf(format, args...))
}

func (o *outcome) Fatalf(format string, args ...any) {
	o.Errorf(format, args...)
	runtime.Goexit()
}

func (o *outcome) Cleanup(f func()) { o.cleanups = append(o.cleanups, f) }

// run runs body, then its cleanups last-registered first, each on a
// goroutine of its own as the testing package does, and returns what
// failed, joined.
func run(t *testing.T, body func(testing.TB)) string {
	o := &outcome{TB: t}
	step := func(f func()) {
		done := make(chan struct{})
		go func() { defer close(done); f() }()
		<-done
	}
	step(func() { body(o) })
	for i := len(o.cleanups) - 1; i >= 0; i-- {
		step(o.cleanups[i])
	}
	return strings.Join(o.failures, "; ")
}

// The waiting helpers run on synctest's clock: a wait that times out
// takes Patience of fake time, no wall time.
func TestWaits(t *testing.T) {
	tests := []struct {
		name string
		body func(testing.TB)
		want string // "" passes; else a part of the failure
	}{
		{"Eventually: a condition that comes true", func(tb testing.TB) {
			start := time.Now()
			Eventually(tb, "a second", func() bool { return time.Since(start) >= time.Second })
		}, ""},
		{"Eventually: a condition that never does", func(tb testing.TB) {
			Eventually(tb, "nothing", func() bool { return false })
		}, "timed out after 20s waiting for nothing"},
		{"EventuallyState: the failure says what was seen last", func(tb testing.TB) {
			n := 0
			EventuallyState(tb, time.Second, "n to be negative", func() (bool, string) { n++; return false, fmt.Sprint("n=", n) })
		}, "waiting for n to be negative; last seen: n="},
		{"Receive: a value sent", func(tb testing.TB) {
			ch := make(chan int, 1)
			ch <- 7
			if got := Receive(tb, ch, "seven"); got != 7 {
				tb.Errorf("got %d", got)
			}
		}, ""},
		{"Receive: nothing sent", func(tb testing.TB) {
			Receive(tb, make(chan int), "a value")
		}, "timed out after 20s waiting for a value"},
		{"Never: a condition that stays false", func(tb testing.TB) {
			Never(tb, "it happened", time.Second, func() bool { return false })
		}, ""},
		{"Never: a condition that comes true within the window", func(tb testing.TB) {
			start := time.Now()
			Never(tb, "it happened", time.Second, func() bool { return time.Since(start) > 500*time.Millisecond })
		}, "it happened"},
		{"Never: a condition that comes true after the window", func(tb testing.TB) {
			start := time.Now()
			Never(tb, "it happened", time.Second, func() bool { return time.Since(start) > 2*time.Second })
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				got := run(t, tt.body)
				if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
					t.Errorf("failures %q, want %q", got, tt.want)
				}
			})
		})
	}
}

func TestNoLeaks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		got := run(t, func(tb testing.TB) {
			NoLeaks(tb)
			go func() { <-release }()
		})
		close(release)
		if !strings.Contains(got, "goroutines leaked") {
			t.Errorf("a goroutine left blocked: failures %q, want a leak", got)
		}
		if got := run(t, func(tb testing.TB) {
			NoLeaks(tb)
			done := make(chan struct{})
			go func() { close(done) }()
			<-done
		}); got != "" {
			t.Errorf("a goroutine that ended: failures %q, want none", got)
		}
	})
}

func TestClock(t *testing.T) {
	start := time.Unix(1000, 0)
	c := NewClock(start)
	c.Advance(1500 * time.Millisecond)
	if got := c.Now().Sub(start); got != 1500*time.Millisecond {
		t.Errorf("after Advance(1.5s): %v from the start", got)
	}
}

func TestTokensAndFirstDiff(t *testing.T) {
	if got := Tokens(5, 3); fmt.Sprint(got) != "[5 6 7]" {
		t.Errorf("Tokens(5, 3) = %v", got)
	}
	tests := []struct {
		got, want []uint32
		diff      string
	}{
		{Tokens(1, 3), Tokens(1, 3), ""},
		{[]uint32{1, 9, 3}, Tokens(1, 3), "first difference at 1: got 9, want 2 (lengths 3 and 3)"},
		{Tokens(1, 2), Tokens(1, 3), "one is a prefix of the other: got length 2, want 3"},
	}
	for _, tt := range tests {
		if d := FirstDiff(tt.got, tt.want); d != tt.diff {
			t.Errorf("FirstDiff(%v, %v) = %q, want %q", tt.got, tt.want, d, tt.diff)
		}
	}
}

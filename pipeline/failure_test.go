package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"
)

// lateTimer is a context whose deadline has passed while its timer has not
// fired yet, as a request's context is for a moment on a busy machine.
type lateTimer struct{ context.Context }

func (lateTimer) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

func TestContextEnded(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"still waiting", context.Background(), nil},
		{"deadline ahead", lateTimerAhead{context.Background()}, nil},
		{"cancelled", cancelled, context.Canceled},
		{"deadline passed, timer not fired", lateTimer{context.Background()}, context.DeadlineExceeded},
	} {
		if got := contextEnded(tc.ctx); !errors.Is(got, tc.want) || (tc.want == nil && got != nil) {
			t.Errorf("%s: contextEnded = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// lateTimerAhead has a deadline still in the future.
type lateTimerAhead struct{ context.Context }

func (lateTimerAhead) Deadline() (time.Time, bool) { return time.Now().Add(time.Hour), true }

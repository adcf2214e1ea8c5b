package bench

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// lockedBuilder is a strings.Builder the status goroutine and the test may
// share.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLiveStatusLine: on a terminal a run rewrites one status line each
// interval with what has ended so far, and erases it when the run ends.
func TestLiveStatusLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out lockedBuilder
		d := &driver{}
		start := time.Now()
		stop := d.live(Config{Live: &out, LiveEvery: time.Second}, "cache_aware", 10, start)

		d.mu.Lock()
		d.outcomes = append(d.outcomes, outcome{}, outcome{}, outcome{err: errors.New("x")})
		d.failed = 1
		d.mu.Unlock()
		time.Sleep(2*time.Second + time.Millisecond) // fake time: two ticks
		synctest.Wait()
		got := out.String()
		want := "\r\x1b[Kcache_aware: 3/10 requests, 1 errors, 1s, 3.0 req/s" + "\r\x1b[Kcache_aware: 3/10 requests, 1 errors, 2s, 1.5 req/s"
		if got != want {
			t.Fatalf("status lines %q, want %q", got, want)
		}
		stop()
		if got := out.String(); !strings.HasSuffix(got, "req/s\r\x1b[K") {
			t.Fatalf("stop left %q; want the line erased", got)
		}
	})
}

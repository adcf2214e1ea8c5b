package bench

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
)

// TestLiveStatusLine: on a terminal a run rewrites one status line each
// interval with what has ended so far, and erases it when the run ends.
func TestLiveStatusLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out testutil.Buffer
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

package server

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestRateLimiterRefillsAndForgetsOldestKeys(t *testing.T) {
	now := time.Unix(0, 0)
	l := newRateLimiter(2, 3, func() time.Time { return now })
	for i, want := range []bool{true, true, false} {
		if got := l.allow("a"); got != want {
			t.Fatalf("request %d: allowed %v, want %v", i, got, want)
		}
	}
	now = now.Add(500 * time.Millisecond) // one token back
	if !l.allow("a") || l.allow("a") {
		t.Fatal("after half a second at 2/s exactly one more request is allowed")
	}

	// Memory stays bounded whatever keys clients send, however long.
	big := strings.Repeat("k", 1<<20)
	for i := range 10_000 {
		l.allow(fmt.Sprintf("%s%d", big[:i%100], i))
	}
	if n := l.keys(); n != 3 {
		t.Fatalf("%d keys remembered, want the limit of 3", n)
	}
}

package testutil

import (
	"sync"
	"time"
)

// Clock is a clock a test moves by hand, for code that takes a clock
// (a func() time.Time) so that timeouts are tested without waiting for
// them. It is safe for concurrent use: the code under test reads it from
// its own goroutines while the test advances it.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

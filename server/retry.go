package server

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// RetryConfig says when a request whose worker failed before the first token
// is tried again on another worker. The defaults are SMG's (5 retries, 50 ms
// doubling by 1.5 up to 30 s, jitter 0.2) with an Envoy-style budget.
type RetryConfig struct {
	// MaxRetries is the number of attempts after the first; 0 disables
	// retries.
	MaxRetries int
	// InitialBackoff is the wait before the first retry; each later wait is
	// Multiplier times the previous, up to MaxBackoff.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	Multiplier     float64
	// Jitter spreads each wait uniformly by ± this fraction, so that the
	// retries of requests that failed together do not arrive together.
	Jitter float64
	// BudgetPercent caps retries in flight at this percentage of the
	// requests in flight (Envoy's retry budget), so that a failing fleet is
	// not hammered with a multiple of its traffic; MinRetryConcurrency
	// retries are always allowed, so a quiet router can still retry.
	BudgetPercent       float64
	MinRetryConcurrency int
}

// DefaultRetryConfig returns SMG's retry defaults and Envoy's budget (20% of
// active requests, at least 3 concurrent retries).
func DefaultRetryConfig() RetryConfig {
	return RetryConfig{
		MaxRetries:          5,
		InitialBackoff:      50 * time.Millisecond,
		MaxBackoff:          30 * time.Second,
		Multiplier:          1.5,
		Jitter:              0.2,
		BudgetPercent:       20,
		MinRetryConcurrency: 3,
	}
}

// Validate reports the first setting out of range, by its flag name.
func (c RetryConfig) Validate() error {
	switch {
	case c.MaxRetries < 0:
		return fmt.Errorf("--retry-max-retries is %d; it must be >= 0 (0 disables retries)", c.MaxRetries)
	case c.InitialBackoff < 0:
		return fmt.Errorf("--retry-initial-backoff-ms is %v; it must be >= 0", c.InitialBackoff)
	case c.MaxBackoff < c.InitialBackoff:
		return fmt.Errorf("--retry-max-backoff-ms (%v) must be >= --retry-initial-backoff-ms (%v)", c.MaxBackoff, c.InitialBackoff)
	case !(c.Multiplier >= 1):
		return fmt.Errorf("--retry-backoff-multiplier is %v; it must be >= 1", c.Multiplier)
	case !(c.Jitter >= 0 && c.Jitter <= 1):
		return fmt.Errorf("--retry-jitter-factor is %v; it must be in [0, 1]", c.Jitter)
	case !(c.BudgetPercent >= 0 && c.BudgetPercent <= 100):
		return fmt.Errorf("--retry-budget-percent is %v; it must be in [0, 100]", c.BudgetPercent)
	case c.MinRetryConcurrency < 0:
		return fmt.Errorf("retry min concurrency is %d; it must be >= 0", c.MinRetryConcurrency)
	}
	return nil
}

// delay is the wait before retry number n (0-based), jittered.
func (c RetryConfig) delay(n int, rnd func() float64) time.Duration {
	d := float64(c.InitialBackoff) * math.Pow(c.Multiplier, float64(n))
	d = min(d, float64(c.MaxBackoff))
	if c.Jitter > 0 {
		d *= 1 + c.Jitter*(2*rnd()-1)
	}
	return time.Duration(d)
}

// retryRefusal says why attempt n (0-based) may not be followed by another,
// or "" when a retry may go ahead, in which case the retry holds a place in
// the budget until release is called (when that retry's attempt is over).
func (s *Server) retryRefusal(ctx context.Context, n int) (why string, release func()) {
	rc := s.cfg.Retry
	if n >= rc.MaxRetries {
		return fmt.Sprintf("%d retries is the limit (--retry-max-retries)", rc.MaxRetries), nil
	}
	if ctx.Err() != nil {
		return "the request ended", nil
	}
	limit := max(int64(rc.MinRetryConcurrency), int64(float64(s.active.Load())*rc.BudgetPercent/100))
	if s.retrying.Add(1) > limit {
		s.retrying.Add(-1)
		s.metrics.retryBudgetExhausted.Inc()
		return fmt.Sprintf("the retry budget is spent (%d retries in flight; --retry-budget-percent %g)", limit, rc.BudgetPercent), nil
	}
	var once sync.Once
	return "", func() { once.Do(func() { s.retrying.Add(-1) }) }
}

// backoff waits before retry n, or returns the context's error if the
// request ends first, or at once if the wait would outlast its deadline.
func (s *Server) backoff(ctx context.Context, n int) error {
	d := s.cfg.Retry.delay(n, rand.Float64)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return context.DeadlineExceeded
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

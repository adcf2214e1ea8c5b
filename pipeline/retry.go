package pipeline

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
	// The retry budget caps the retries in flight, so that a fleet failing
	// as a whole is not hammered with a multiple of its traffic, while a
	// fleet of which a part fails retries every request another worker can
	// take. Each worker able to serve (healthy, not draining, its circuit
	// breaker not open) may take, at once, as many retries as its share of
	// the requests in flight and at least RetriesPerWorker; and the budget
	// is never less than BudgetPercent of the requests in flight (Envoy's
	// retry budget) nor than MinRetryConcurrency (so that a quiet router
	// can retry).
	//
	// BudgetPercent alone refused retries exactly when they were needed:
	// the requests on a worker that fails fail together, a burst as large
	// as that worker's share of the traffic (a fourth of it when one of four
	// workers fails, more than 20%), and with three of four failing, three
	// fourths of the requests need the one worker left. An able worker's
	// share of the requests in flight is what it holds already, and an
	// engine that batches hundreds of requests takes RetriesPerWorker more
	// at once; so the budget follows what the able part of the fleet can
	// absorb. When the whole fleet fails, the failing workers' breakers
	// open one by one, and the budget falls to BudgetPercent.
	BudgetPercent       float64
	MinRetryConcurrency int
	RetriesPerWorker    int
}

// DefaultRetryConfig returns SMG's retry defaults, Envoy's budget (20% of
// active requests, at least 3 concurrent retries) as the budget's floor, and
// 16 retries at once per able worker: a worker's share of a burst is no more
// than that until a router holds 16 requests per worker, and engines batch
// far more (SGLang and vLLM run hundreds of requests at once).
func DefaultRetryConfig() RetryConfig {
	return RetryConfig{
		MaxRetries:          5,
		InitialBackoff:      50 * time.Millisecond,
		MaxBackoff:          30 * time.Second,
		Multiplier:          1.5,
		Jitter:              0.2,
		BudgetPercent:       20,
		MinRetryConcurrency: 3,
		RetriesPerWorker:    16,
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
	case c.RetriesPerWorker < 0:
		return fmt.Errorf("--retry-budget-per-worker is %d; it must be >= 0", c.RetriesPerWorker)
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
func (s *Pipeline) retryRefusal(ctx context.Context, n int) (why string, release func()) {
	rc := s.cfg.Retry
	if n >= rc.MaxRetries {
		return fmt.Sprintf("%d retries is the limit (--retry-max-retries)", rc.MaxRetries), nil
	}
	if ctx.Err() != nil {
		return "the request ended", nil
	}
	limit, able, registered := s.retryLimit()
	if s.retrying.Add(1) > limit {
		s.retrying.Add(-1)
		s.metrics.retryBudgetExhausted.Inc()
		return fmt.Sprintf("the retry budget is spent (%d retries in flight: %d of %d workers able to serve, --retry-budget-per-worker %d, --retry-budget-percent %g)",
			limit, able, registered, rc.RetriesPerWorker, rc.BudgetPercent), nil
	}
	var once sync.Once
	return "", func() { once.Do(func() { s.retrying.Add(-1) }) }
}

// retryLimit is the number of retries the budget allows in flight now, with
// the counts of workers it was computed from.
func (s *Pipeline) retryLimit() (limit int64, able, registered int) {
	ws := s.reg.Current().Workers
	for _, w := range ws {
		if w.Available() {
			able++
		}
	}
	return s.cfg.Retry.budget(s.active.Load(), able, len(ws)), able, len(ws)
}

// budget is the number of retries allowed in flight among active requests
// when able of the registered workers can take a new request (see
// RetryConfig).
func (c RetryConfig) budget(active int64, able, registered int) int64 {
	limit := max(int64(c.MinRetryConcurrency), int64(float64(active)*c.BudgetPercent/100))
	if able == 0 {
		return limit
	}
	perWorker := max(int64(c.RetriesPerWorker), active/int64(registered))
	return max(limit, int64(able)*perWorker)
}

// backoff waits before retry n, or returns the context's error if the
// request ends first, or at once if the wait would outlast its deadline.
func (s *Pipeline) backoff(ctx context.Context, n int) error {
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

// Reliability is how the pipeline treats failing workers.
type Reliability struct {
	// Retry governs failover before the first token.
	Retry RetryConfig
	// FirstTokenTimeout fails an attempt whose engine sent no token this
	// long after it was started (it is then retried elsewhere); 0: no limit.
	FirstTokenTimeout time.Duration
	// StreamIdleTimeout fails an attempt whose engine, after its first
	// token, sent nothing for this long; 0: no limit.
	StreamIdleTimeout time.Duration
	// AbortConfirmTimeout bounds how long a request the router gave up on
	// (client gone, timeout, output complete) stays counted in flight on
	// its worker while the engine has not ended its stream: engines that
	// ignore Abort keep working on it (see held.go). 0: released at once.
	AbortConfirmTimeout time.Duration
}

// DefaultReliability returns SMG's retry defaults, a 60 s first-token
// timeout (a 128K-token prompt prefills in a few seconds on one H100, so a
// minute without a token is a stalled engine or a hopeless queue) and a 30 s
// idle timeout between tokens (decode steps take milliseconds).
func DefaultReliability() Reliability {
	return Reliability{
		Retry:             DefaultRetryConfig(),
		FirstTokenTimeout: 60 * time.Second,
		StreamIdleTimeout: 30 * time.Second,
		// A generation of a few thousand tokens at tens of milliseconds
		// a token: longer than most requests an engine runs after an
		// ignored Abort, short enough that a stream that never ends
		// frees its count soon.
		AbortConfirmTimeout: 60 * time.Second,
	}
}

// Validate reports the first setting out of range, by its flag name.
func (r Reliability) Validate() error {
	if r.FirstTokenTimeout < 0 {
		return fmt.Errorf("--first-token-timeout is %v; it must be >= 0 (0: no limit)", r.FirstTokenTimeout)
	}
	if r.AbortConfirmTimeout < 0 {
		return fmt.Errorf("--abort-confirm-timeout is %v; it must be >= 0 (0: release at once)", r.AbortConfirmTimeout)
	}
	if r.StreamIdleTimeout < 0 {
		return fmt.Errorf("--stream-idle-timeout is %v; it must be >= 0 (0: no limit)", r.StreamIdleTimeout)
	}
	return r.Retry.Validate()
}

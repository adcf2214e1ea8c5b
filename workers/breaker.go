package workers

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// BreakerState is where a circuit breaker stands.
type BreakerState int32

const (
	// BreakerClosed lets every request through and counts consecutive
	// failures.
	BreakerClosed BreakerState = iota
	// BreakerOpen refuses every request until its timeout has passed.
	BreakerOpen
	// BreakerHalfOpen lets a few probe requests through; their outcomes
	// decide between closing and opening again.
	BreakerHalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("BreakerState(%d)", int32(s))
}

// BreakerConfig tunes a worker's circuit breaker. Start from
// DefaultBreakerConfig: zero is a value here, not "use the default"
// (FailureThreshold 0 disables the breaker).
type BreakerConfig struct {
	// FailureThreshold consecutive failures open the breaker. 0 disables
	// the breaker: it stays closed and Acquire always succeeds.
	FailureThreshold int
	// SuccessThreshold consecutive successful probes close a half-open
	// breaker.
	SuccessThreshold int
	// Timeout is how long an open breaker refuses before it lets probes
	// through.
	Timeout time.Duration
	// HalfOpenProbes bounds the requests in flight on a half-open breaker.
	// One (the default) means probes run one after another, so that an
	// engine that has just come back is not hit by a burst.
	HalfOpenProbes int
	// Now reads the clock; nil means time.Now. Tests set a fake clock.
	Now func() time.Time
	// OnChange, when set, is called on every state change with the name
	// given to NewBreaker (the worker's URL), for metrics, logs and the
	// requests waiting in the router for room. It runs with the breaker
	// locked, so that calls arrive in order: it must not block, call the
	// breaker, or take a lock held by code that calls the breaker. With the
	// real clock (Now nil), an open breaker turns half-open and says so when
	// its timeout passes, not only when something next asks it.
	OnChange func(name string, from, to BreakerState)
}

// DefaultBreakerConfig returns the defaults of SMG and Envoy's outlier
// detection: 10 consecutive failures open the breaker for 60 s, then 3
// consecutive successful probes, one at a time, close it.
func DefaultBreakerConfig() BreakerConfig {
	return BreakerConfig{FailureThreshold: 10, SuccessThreshold: 3, Timeout: 60 * time.Second, HalfOpenProbes: 1}
}

// Validate reports the first bad field. A disabled breaker (FailureThreshold
// 0) ignores the other thresholds.
func (c BreakerConfig) Validate() error {
	switch {
	case c.FailureThreshold < 0:
		return fmt.Errorf("breaker: FailureThreshold must be >= 0 (0 disables the breaker), got %d", c.FailureThreshold)
	case c.FailureThreshold == 0:
		return nil
	case c.SuccessThreshold < 1:
		return fmt.Errorf("breaker: SuccessThreshold must be >= 1, got %d", c.SuccessThreshold)
	case c.Timeout <= 0:
		return fmt.Errorf("breaker: Timeout must be > 0, got %v", c.Timeout)
	case c.HalfOpenProbes < 1:
		return fmt.Errorf("breaker: HalfOpenProbes must be >= 1, got %d", c.HalfOpenProbes)
	}
	return nil
}

// Breaker is one worker's circuit breaker, so that a failing worker stops
// looking attractive at once instead of at the next health check.
//
// The dispatcher uses it in two steps. Allow is a cheap, non-consuming check
// for filtering candidates. Acquire, called for the one worker chosen, takes
// a slot (a probe slot when half-open) and returns the function that records
// the attempt's outcome. A plain Allow+Record pair cannot bound probes: many
// dispatchers would pass Allow on a half-open breaker at the same moment.
//
// Outcomes count only in the period they were acquired in: when the state
// changes, late outcomes of earlier attempts are dropped, so a slow failure
// from before the breaker opened cannot re-open it after it closed, and only
// probes decide a half-open breaker.
type Breaker struct {
	name  string
	cfg   BreakerConfig
	state atomic.Int32 // BreakerState; read without the lock by Allow

	// announce turns the breaker half-open when its timeout passes (see
	// BreakerConfig.OnChange); nil with a clock of the caller's.
	announce func(time.Duration)

	mu        sync.Mutex
	timer     *time.Timer // the pending announce of an open breaker
	epoch     uint64      // increases with every state change
	failures  int         // consecutive, while closed
	successes int         // consecutive, while half-open
	probes    int         // in flight, while half-open
	openedAt  time.Time
}

// Verdict is what an attempt on a worker says about it.
type Verdict int

const (
	// Success: the engine served the request (or refused it for the
	// client's fault, such as INVALID_ARGUMENT).
	Success Verdict = iota
	// Failure: the engine failed (unreachable, dropped or broken stream).
	Failure
	// Ignored: the attempt says nothing about the engine (the client
	// went away); it frees its slot without counting.
	Ignored
)

// ErrBreakerConfig is wrapped by NewBreaker and Reconfigure for a config that
// does not validate.
var ErrBreakerConfig = errors.New("invalid breaker config")

// NewBreaker returns a closed breaker. name identifies it to OnChange.
func NewBreaker(name string, cfg BreakerConfig) (*Breaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBreakerConfig, err)
	}
	b := &Breaker{name: name}
	b.useLocked(cfg)
	return b, nil
}

// useLocked takes cfg as the configuration. Nobody is told an open
// breaker's timeout passed unless the clock is the real one, whose time a
// timer measures, and somebody listens.
func (b *Breaker) useLocked(cfg BreakerConfig) {
	b.announce = nil
	if cfg.Now == nil {
		cfg.Now = time.Now
		if cfg.OnChange != nil {
			b.announce = b.announceAfter
		}
	}
	b.cfg = cfg
}

// announceAfter, called when the breaker opens, turns it half-open once d
// has passed, which tells OnChange: otherwise an open breaker turns
// half-open only when something asks it (Allow, Acquire, State), and
// requests waiting in the router for an engine with room ask only when
// woken, so they slept through the moment the engine could take a probe.
func (b *Breaker) announceAfter(d time.Duration) {
	if b.timer != nil {
		b.timer.Stop()
	}
	b.timer = time.AfterFunc(d, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.advanceLocked()
	})
}

// Reconfigure replaces the configuration and closes the breaker, dropping
// the outcomes of attempts in flight.
func (b *Breaker) Reconfigure(cfg BreakerConfig) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBreakerConfig, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.useLocked(cfg)
	b.setLocked(BreakerClosed)
	return nil
}

// State returns the breaker's state; an open breaker whose timeout has
// passed reads as half-open.
func (b *Breaker) State() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked()
	return BreakerState(b.state.Load())
}

// Allow reports whether Acquire would succeed now: the breaker is closed,
// half-open with a free probe slot, or open with its timeout passed. It takes
// nothing; a closed breaker answers without locking.
func (b *Breaker) Allow() bool {
	if BreakerState(b.state.Load()) == BreakerClosed {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked()
	return b.allowLocked()
}

// Places is how many attempts Acquire would let through now, -1 for no
// bound (closed, or disabled): a half-open breaker's free probe places, 0
// for an open one. Late binding counts an engine's room with it: an engine
// of many free running places behind a half-open breaker takes one probe,
// and a second request bound for it would find it unavailable. A closed
// breaker answers without locking.
func (b *Breaker) Places() int {
	if BreakerState(b.state.Load()) == BreakerClosed {
		return -1
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked()
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return -1
	case BreakerHalfOpen:
		return max(0, b.cfg.HalfOpenProbes-b.probes)
	}
	return 0
}

func (b *Breaker) allowLocked() bool {
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return true
	case BreakerHalfOpen:
		return b.probes < b.cfg.HalfOpenProbes
	}
	return false
}

// Acquire takes a slot for one attempt. When ok, done must be called once
// with the attempt's outcome (later calls do nothing); when half-open, the
// slot is a probe slot and is held until done. When not ok, done is nil.
func (b *Breaker) Acquire() (done func(Verdict), ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cfg.FailureThreshold == 0 {
		return func(Verdict) {}, true
	}
	b.advanceLocked()
	if !b.allowLocked() {
		return nil, false
	}
	epoch := b.epoch
	probe := BreakerState(b.state.Load()) == BreakerHalfOpen
	if probe {
		b.probes++
	}
	var once sync.Once
	return func(o Verdict) { once.Do(func() { b.record(epoch, probe, o) }) }, true
}

func (b *Breaker) record(epoch uint64, probe bool, o Verdict) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if epoch != b.epoch {
		return // the state changed since: this outcome is stale
	}
	if probe {
		b.probes--
	}
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		switch o {
		case Success:
			b.failures = 0
		case Failure:
			b.failures++
			if b.failures >= b.cfg.FailureThreshold {
				b.setLocked(BreakerOpen)
			}
		}
	case BreakerHalfOpen:
		switch o {
		case Success:
			b.successes++
			if b.successes >= b.cfg.SuccessThreshold {
				b.setLocked(BreakerClosed)
			}
		case Failure:
			b.setLocked(BreakerOpen)
		}
	}
}

// advanceLocked turns an open breaker whose timeout has passed half-open.
func (b *Breaker) advanceLocked() {
	if BreakerState(b.state.Load()) == BreakerOpen && !b.cfg.Now().Before(b.openedAt.Add(b.cfg.Timeout)) {
		b.setLocked(BreakerHalfOpen)
	}
}

// setLocked enters state s (even the current one, which starts a new
// period), resets the counters and tells OnChange.
func (b *Breaker) setLocked(s BreakerState) {
	from := BreakerState(b.state.Load())
	b.epoch++
	b.failures, b.successes, b.probes = 0, 0, 0
	if s == BreakerOpen {
		b.openedAt = b.cfg.Now()
		if b.announce != nil {
			b.announce(b.cfg.Timeout)
		}
	}
	b.state.Store(int32(s))
	if from != s && b.cfg.OnChange != nil {
		b.cfg.OnChange(b.name, from, s)
	}
}

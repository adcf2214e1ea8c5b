// Package lograte limits how often a recurring warning is written. A peer
// that misbehaves on purpose (an engine skipping sequence numbers, flooding
// events) would otherwise write a line per occurrence, thousands a second;
// operators need to know that it happens and how often, which one line per
// interval with the count held back says, while metrics count every one.
package lograte

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Limiter lets one WARN line through per interval and writes the others at
// DEBUG; the next WARN carries how many were held back ("suppressed") and
// since when. The zero value is not usable: build it with New. It is safe
// for concurrent use.
type Limiter struct {
	every time.Duration

	mu         sync.Mutex
	last       time.Time // zero: nothing written yet
	suppressed int
}

// New returns a limiter writing at most one WARN line per every.
func New(every time.Duration) *Limiter { return &Limiter{every: every} }

// Warn writes msg with args to log at WARN if the interval since the last
// WARN has passed, else at DEBUG.
func (l *Limiter) Warn(log *slog.Logger, msg string, args ...any) {
	now := time.Now()
	l.mu.Lock()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.suppressed++
		l.mu.Unlock()
		log.Debug(msg, args...)
		return
	}
	if l.suppressed > 0 {
		args = append(args, "suppressed", l.suppressed, "suppressed_since", l.last)
	}
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	log.Log(context.Background(), slog.LevelWarn, msg, args...)
}

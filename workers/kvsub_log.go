package workers

import (
	"context"
	"log/slog"
	"time"
)

// kvWarnEvery is the least time between two WARN lines of one worker's
// subscription. An engine that skips numbers or breaks its stream on every
// batch would otherwise write a line per resubscription; operators need to
// know that it happens and how often, which the next line says.
const kvWarnEvery = time.Minute

// warnLimiter lets one WARN line through per interval and counts the ones
// it held back, which the next line reports (and which go out at DEBUG
// meanwhile). It belongs to one goroutine.
type warnLimiter struct {
	every      time.Duration
	last       time.Time // zero: nothing logged yet
	suppressed int
}

// log writes msg at WARN if the interval since the last WARN has passed,
// with the number of lines held back since as "suppressed"; otherwise at
// DEBUG.
func (l *warnLimiter) log(log *slog.Logger, msg string, args ...any) {
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.suppressed++
		log.Debug(msg, args...)
		return
	}
	if l.suppressed > 0 {
		args = append(args, "suppressed", l.suppressed, "suppressed_since", l.last)
	}
	l.last, l.suppressed = now, 0
	log.Log(context.Background(), slog.LevelWarn, msg, args...)
}

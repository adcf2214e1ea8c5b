// Package logging builds kvgate's process logger, so that kvgate serve and
// the tests that read its lines use one and the same: text or JSON lines,
// durations written as people read them, and the trace and span ids of the
// request a line is about.
package logging

import (
	"io"
	"log/slog"

	"github.com/kvgate/kvgate/internal/tracing"
)

// New returns a logger writing lines at level and above to w, as JSON when
// json is set.
func New(w io.Writer, level slog.Level, json bool) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: ReadableDurations}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if json {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(tracing.NewLogHandler(h))
}

// ReadableDurations is a slog ReplaceAttr that writes durations as
// time.Duration.String does ("1.5s"), where the JSON handler would write
// nanosecond integers that nobody reads at a glance.
func ReadableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

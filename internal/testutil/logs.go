package testutil

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// Logs is a slog.Handler that keeps every record at or above its level, for
// tests that state what a component logged (how many warnings, with which
// attributes).
type Logs struct {
	Level slog.Level

	mu      sync.Mutex
	records []slog.Record
}

// Logger returns a logger writing to l.
func (l *Logs) Logger() *slog.Logger { return slog.New(l) }

// Enabled implements slog.Handler.
func (l *Logs) Enabled(_ context.Context, level slog.Level) bool { return level >= l.Level }

// Handle implements slog.Handler.
func (l *Logs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}

// WithAttrs implements slog.Handler; the attributes are dropped (tests
// look at each record's own).
func (l *Logs) WithAttrs([]slog.Attr) slog.Handler { return l }

// WithGroup implements slog.Handler.
func (l *Logs) WithGroup(string) slog.Handler { return l }

// Records returns the records kept so far, at level or above.
func (l *Logs) Records(level slog.Level) []slog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(l.records), func(r slog.Record) bool { return r.Level < level })
}

// Attr returns the value of r's attribute key, or false.
func Attr(r slog.Record, key string) (slog.Value, bool) {
	var v slog.Value
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v, found = a.Value, true
			return false
		}
		return true
	})
	return v, found
}

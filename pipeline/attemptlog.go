package pipeline

import (
	"context"
	"log/slog"
	"sync"
)

// attemptLogger is the logger of one attempt: the pipeline's, with the
// request's id, the attempt's number, the plan's attributes (worker,
// policy, branch, the decision's reason) and the workers left out for
// their limits (Job.LeftOut). slog's With formats attributes
// as it is called, the decision's reason among them, and most attempts log
// nothing (at --log-level warn a successful one writes no line), so the
// attributes are computed and added at the attempt's first line instead:
// the lines read exactly as with With.
func (s *Pipeline) attemptLogger(j *Job, n int, p *Plan) *slog.Logger {
	return slog.New(&lazyAttrs{base: s.log.Handler(), attrs: func() []any {
		attrs := append([]any{"request_id", j.ID, "attempt", n}, p.logAttrs()...)
		if note := j.LeftOut(); note != "" {
			attrs = append(attrs, "left_out", note)
		}
		return attrs
	}})
}

// lazyAttrs is a handler that adds attributes to base when it first
// handles a record or derives a handler (WithAttrs, WithGroup); Enabled
// asks base alone, so a record below the level costs nothing.
//
// A record it handles itself gets the attributes in front of its own, as
// With would write them, rather than through a handler derived with them:
// deriving one formats the attributes ahead of time (slog's text and JSON
// handlers do), work that only pays for itself over many lines, and an
// attempt writes one or two. At --log-level info, where every request
// writes "generate done", deriving it took 7% of the router's CPU for a
// 1K-token Generate (BENCHMARKS "The access log built only when written").
type lazyAttrs struct {
	base  slog.Handler
	attrs func() []any
	once  sync.Once
	args  []any // attrs(), once called
	hOnce sync.Once
	h     slog.Handler // base with args, once derived
}

func (l *lazyAttrs) list() []any {
	l.once.Do(func() { l.args = l.attrs() })
	return l.args
}

func (l *lazyAttrs) handler() slog.Handler {
	l.hOnce.Do(func() { l.h = slog.New(l.base).With(l.list()...).Handler() })
	return l.h
}

func (l *lazyAttrs) Enabled(ctx context.Context, level slog.Level) bool {
	return l.base.Enabled(ctx, level)
}

func (l *lazyAttrs) Handle(ctx context.Context, r slog.Record) error {
	with := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	with.Add(l.list()...)
	r.Attrs(func(a slog.Attr) bool {
		with.AddAttrs(a)
		return true
	})
	return l.base.Handle(ctx, with)
}

func (l *lazyAttrs) WithAttrs(as []slog.Attr) slog.Handler { return l.handler().WithAttrs(as) }
func (l *lazyAttrs) WithGroup(name string) slog.Handler    { return l.handler().WithGroup(name) }

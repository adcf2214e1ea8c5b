package pipeline

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/kvgate/kvgate/internal/tracing"
	"github.com/kvgate/kvgate/workers"
)

// An attempt's logger writes the lines a logger made with With writes, and
// computes its attributes only when a line is written: through slog's text
// and JSON handlers, and the tracing wrapper around them that adds the
// request's trace to each line.
func TestLazyAttrsReadsAsWith(t *testing.T) {
	attrs := []any{"request_id", "r1", "attempt", 0, "worker", "grpc://w1"}
	traced := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled}))
	handlers := []struct {
		name string
		new  func(w io.Writer, o *slog.HandlerOptions) slog.Handler
		ctx  context.Context
	}{
		{"text", func(w io.Writer, o *slog.HandlerOptions) slog.Handler { return slog.NewTextHandler(w, o) }, context.Background()},
		{"JSON", func(w io.Writer, o *slog.HandlerOptions) slog.Handler { return slog.NewJSONHandler(w, o) }, context.Background()},
		{"JSON traced", func(w io.Writer, o *slog.HandlerOptions) slog.Handler {
			return tracing.NewLogHandler(slog.NewJSONHandler(w, o))
		}, traced},
	}
	for _, tc := range []struct {
		name     string
		level    slog.Level
		log      func(ctx context.Context, l *slog.Logger)
		computed bool
	}{
		{"below the level: nothing computed", slog.LevelWarn, func(ctx context.Context, l *slog.Logger) {
			l.InfoContext(ctx, "generate done", "prompt_tokens", 3)
		}, false},
		{"a line", slog.LevelInfo, func(ctx context.Context, l *slog.Logger) {
			l.InfoContext(ctx, "generate done", "prompt_tokens", 3)
		}, true},
		{"a derived logger", slog.LevelInfo, func(ctx context.Context, l *slog.Logger) {
			l.With("tool_calls", 2).WarnContext(ctx, "abort failed")
		}, true},
		{"a group", slog.LevelInfo, func(ctx context.Context, l *slog.Logger) {
			l.WithGroup("g").InfoContext(ctx, "x", "k", "v")
		}, true},
		{"two lines, one without attributes of its own", slog.LevelInfo, func(ctx context.Context, l *slog.Logger) {
			l.WarnContext(ctx, "engine slow")
			l.InfoContext(ctx, "generate done", "prompt_tokens", 3, slog.Group("usage", "cached", 1))
		}, true},
	} {
		for _, h := range handlers {
			t.Run(tc.name+"/"+h.name, func(t *testing.T) {
				var want, got bytes.Buffer
				opts := &slog.HandlerOptions{Level: tc.level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey {
						return slog.Attr{}
					}
					return a
				}}
				ctx := h.ctx
				tc.log(ctx, slog.New(h.new(&want, opts)).With(attrs...))
				computed := 0
				lazy := slog.New(&lazyAttrs{base: h.new(&got, opts), attrs: func() []any {
					computed++
					return attrs
				}})
				tc.log(ctx, lazy)
				if got.String() != want.String() {
					t.Errorf("lazy logger wrote %q, With wrote %q", got.String(), want.String())
				}
				if (computed > 0) != tc.computed || computed > 1 {
					t.Errorf("attributes computed %d times, want them computed: %v, at most once", computed, tc.computed)
				}
			})
		}
	}
}

// Without a recording request span the legs open no spans and the attempt
// runs on the request's context: one allocation, for the attempt's set of
// (no) spans, whatever the number of legs.
func TestStartLegsUntracedAllocatesOnce(t *testing.T) {
	s := New(Config{})
	w := func(url string) *workers.Worker {
		return workers.NewWorker(url, workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, nil, nil)
	}
	for _, tc := range []struct {
		name string
		legs []Leg
	}{
		{"one leg", []Leg{{Role: "regular", Worker: w("w1")}}},
		{"a pair", []Leg{{Role: "prefill", Worker: w("p1")}, {Role: "decode", Worker: w("d1")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Plan{Legs: tc.legs}
			ctx := context.Background()
			n := testing.AllocsPerRun(100, func() {
				lctx, ls := s.startLegs(ctx, p, 0)
				if lctx != ctx {
					t.Fatal("an untraced attempt runs on a context of its own")
				}
				ls.end(nil)
			})
			if n != 1 {
				t.Errorf("%v allocations per attempt, want 1", n)
			}
			for _, l := range p.Legs {
				if l.Span == nil || l.Span.IsRecording() {
					t.Errorf("leg %s: span %v, want a non-recording one", l.Role, l.Span)
				}
			}
		})
	}
}

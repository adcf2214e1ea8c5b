package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

func TestLinesAreReadableAndCarryTheTrace(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 1},
		SpanID:     trace.SpanID{0x00, 0xf0, 2},
		TraceFlags: trace.FlagsSampled,
	})
	traced := trace.ContextWithSpanContext(context.Background(), sc)
	tests := []struct {
		name  string
		ctx   context.Context
		attrs []any
		want  map[string]any // "" value: must be absent
	}{
		{"a duration reads as one", context.Background(), []any{"duration", 1500 * time.Microsecond},
			map[string]any{"duration": "1.5ms", "trace_id": nil}},
		{"a duration in a group too", context.Background(), []any{slog.Group("g", "wait", 2*time.Second)},
			map[string]any{"g": map[string]any{"wait": "2s"}}},
		{"other values stay as they are", context.Background(), []any{"n", 3, "s", "x"},
			map[string]any{"n": float64(3), "s": "x"}},
		{"a traced context adds its ids", traced, []any{"k", "v"},
			map[string]any{"trace_id": sc.TraceID().String(), "span_id": sc.SpanID().String(), "k": "v"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			New(&b, slog.LevelInfo, true).With("base", 1).InfoContext(tt.ctx, "m", tt.attrs...)
			var got map[string]any
			if err := json.Unmarshal(b.Bytes(), &got); err != nil {
				t.Fatalf("%s: %v", b.String(), err)
			}
			for k, v := range tt.want {
				if g, ok := got[k]; v == nil && ok || v != nil && !equal(g, v) {
					t.Errorf("%s = %v, want %v (line %s)", k, g, v, strings.TrimSpace(b.String()))
				}
			}
		})
	}
}

func equal(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func TestTextLinesAreReadableToo(t *testing.T) {
	var b bytes.Buffer
	New(&b, slog.LevelInfo, false).Info("m", "duration", 90*time.Second)
	if !strings.Contains(b.String(), "duration=1m30s") {
		t.Fatalf("text line %q", b.String())
	}
}

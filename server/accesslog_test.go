package server_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/logging"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// The access log writes a call's "finished call" line at its code's level
// (INFO for OK, WARN for RESOURCE_EXHAUSTED) with every field go-grpc-
// middleware's logging interceptor wrote, and writes nothing for a call
// whose level the logger drops.
func TestAccessLogLineAtItsLevel(t *testing.T) {
	tests := []struct {
		level          slog.Level
		okLine, exLine bool
	}{
		{slog.LevelInfo, true, true},
		{slog.LevelWarn, false, true},
		{slog.LevelError, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.level.String(), func(t *testing.T) {
			var logs logBuffer
			f := startFleet(t, fleetOptions{workers: 1,
				sim: func(_ int, c *sim.Config) { c.Faults.StallAfterTokens = 3 },
				config: func(c *router.Config) {
					c.Logger = logging.New(&logs, tt.level, true)
					c.Admission.MaxConcurrentRequests, c.Admission.QueueSize = 1, 0
					c.Reliability.StreamIdleTimeout = 0
				}})
			md := func(ctx context.Context, id string) context.Context {
				return metadata.AppendToOutgoingContext(ctx, "x-request-id", id)
			}
			sp := &kvgatev1.SamplingParams{MaxNewTokens: u32(2), IgnoreEos: true}
			deadline, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			if _, err := f.generate(md(deadline, "ok-1"), t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8), SamplingParams: sp}); err != nil {
				t.Fatal(err)
			}

			held, cancelHeld := context.WithCancel(md(context.Background(), "held-1"))
			defer cancelHeld()
			f.streaming(held, t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8),
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(100), IgnoreEos: true}})
			_, exErr := f.generate(md(context.Background(), "ex-1"), t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8), SamplingParams: sp})
			if status.Code(exErr) != codes.ResourceExhausted {
				t.Fatalf("over the limit: %v", exErr)
			}

			ok, ex := logs.about(t, "ok-1"), logs.about(t, "ex-1")
			if (len(ok) > 0) != tt.okLine || (len(ex) > 0) != tt.exLine {
				t.Fatalf("lines about ok-1 %v, ex-1 %v; want a line: %v, %v", ok, ex, tt.okLine, tt.exLine)
			}
			if tt.okLine {
				call := ok[len(ok)-1]
				wantAccessFields(t, call, "INFO", "OK")
				if d, _ := call["grpc.request.deadline"].(string); !parses(d) {
					t.Errorf("grpc.request.deadline %q, want an RFC 3339 time", d)
				}
			}
			if tt.exLine {
				wantAccessFields(t, ex[0], "WARN", "ResourceExhausted")
				wantLine(t, ex[0], map[string]string{"grpc.error": exErr.Error()})
				if _, has := ex[0]["grpc.request.deadline"]; has {
					t.Errorf("a call without a deadline logged grpc.request.deadline: %v", ex[0])
				}
			}
		})
	}
}

// wantAccessFields checks a "finished call" line of a unary-style
// Generate (one message each way, as a server stream).
func wantAccessFields(t *testing.T, line map[string]any, level, code string) {
	t.Helper()
	wantLine(t, line, map[string]string{"msg": "finished call", "level": level, "grpc.code": code,
		"protocol": "grpc", "grpc.component": "server", "grpc.service": "kvgate.v1.Router", "grpc.method": "Generate",
		"grpc.method_type": "server_stream"})
	if p, _ := line["peer.address"].(string); p == "" {
		t.Errorf("no peer.address: %v", line)
	}
	if s, _ := line["grpc.start_time"].(string); !parses(s) {
		t.Errorf("grpc.start_time %q, want an RFC 3339 time", s)
	}
	s, _ := line["grpc.time_ms"].(string)
	if ms, err := strconv.ParseFloat(s, 64); err != nil || ms < 0 {
		t.Errorf("grpc.time_ms %q: want milliseconds as a string (%v)", s, err)
	}
}

func parses(rfc3339 string) bool {
	_, err := time.Parse(time.RFC3339, rfc3339)
	return err == nil
}

package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/logging"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// logBuffer collects a router's JSON log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// logger is the router's logger as kvgate serve --log-json builds it.
func (l *logBuffer) logger() *slog.Logger { return logging.New(l, slog.LevelDebug, true) }

// lines parses every line, failing the test on a line that is not one JSON
// object or that holds a key twice (at any depth).
func (l *logBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	text := l.b.String()
	l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if line == "" {
			continue
		}
		if err := noDuplicateKeys(line); err != nil {
			t.Fatalf("log line %s: %v", line, err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %s: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// find returns the lines with that message.
func (l *logBuffer) find(t *testing.T, msg string) []map[string]any {
	var out []map[string]any
	for _, m := range l.lines(t) {
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// about returns the lines that name a request.
func (l *logBuffer) about(t *testing.T, id string) []map[string]any {
	var out []map[string]any
	for _, m := range l.lines(t) {
		if m["request_id"] == id {
			out = append(out, m)
		}
	}
	return out
}

// noDuplicateKeys walks a JSON document token by token and reports the
// first object that holds a key twice, which encoding/json would silently
// resolve by keeping the last.
func noDuplicateKeys(doc string) error {
	dec := json.NewDecoder(strings.NewReader(doc))
	var walk func() error
	walk = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				key := k.(string)
				if seen[key] {
					return fmt.Errorf("key %q appears twice", key)
				}
				seen[key] = true
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token() // '}'
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token() // ']'
			return err
		}
		return nil
	}
	if err := walk(); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("trailing data after the object")
	}
	return nil
}

func TestNoDuplicateKeysDetectsThem(t *testing.T) {
	tests := []struct {
		doc string
		dup bool
	}{
		{`{"a":1,"b":{"a":2}}`, false},
		{`{"a":1,"a":2}`, true},
		{`{"a":[{"x":1,"x":2}]}`, true},
		{`{"reason":"x","g":{"k":1},"reason":"y"}`, true},
	}
	for _, tt := range tests {
		if err := noDuplicateKeys(tt.doc); (err != nil) != tt.dup {
			t.Errorf("%s: %v, want duplicate %v", tt.doc, err, tt.dup)
		}
	}
}

// wantLine checks a log line's fields.
func wantLine(t *testing.T, line map[string]any, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := fmt.Sprint(line[k]); got != v {
			t.Errorf("log line %v: %s = %q, want %q", line, k, got, v)
		}
	}
}

// Request log lines name the request (its x-request-id when request_id is
// empty) and its trace; rejected requests are logged once with their code
// and message; a cancelled request's lines hold each key once.
func TestRequestLogLines(t *testing.T) {
	var logs logBuffer
	tf := startTracedFleet(t, fleetOptions{workers: 1,
		sim: func(_ int, c *sim.Config) { c.Faults.StallAfterTokens = 3 },
		config: func(c *router.Config) {
			c.Logger = logs.logger()
			c.Admission.MaxConcurrentRequests, c.Admission.QueueSize = 1, 0
			c.Reliability.StreamIdleTimeout = 0
		}})
	md := func(id string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "x-request-id", id, "traceparent", traceparent)
	}
	sp := &kvgatev1.SamplingParams{MaxNewTokens: u32(2), IgnoreEos: true}

	// Completed: "generate done" carries the header's id and the trace.
	if _, err := tf.generate(md("done-1"), t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8), SamplingParams: sp}); err != nil {
		t.Fatal(err)
	}
	done := logs.find(t, "generate done")
	if len(done) != 1 {
		t.Fatalf("%d 'generate done' lines, want 1", len(done))
	}
	wantLine(t, done[0], map[string]string{"request_id": "done-1", "trace_id": clientTraceID})
	if d, ok := done[0]["duration"].(string); !ok || !strings.HasSuffix(d, "s") {
		t.Errorf("duration %v, want a readable duration such as 1.5ms", done[0]["duration"])
	}
	call := logs.about(t, "done-1")
	if len(call) != 2 || call[1]["msg"] != "finished call" {
		t.Fatalf("lines about done-1: %v, want 'generate done' and 'finished call'", call)
	}

	// Invalid: refused by validation, logged once, by the call's line.
	_, err := tf.generate(md("bad-1"), t, &kvgatev1.GenerateRequest{SamplingParams: sp})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty prompt: %v", err)
	}
	bad := logs.about(t, "bad-1")
	if len(bad) != 1 {
		t.Fatalf("%d lines about bad-1, want 1: %v", len(bad), bad)
	}
	wantLine(t, bad[0], map[string]string{"msg": "finished call", "grpc.code": "InvalidArgument",
		"grpc.error": err.Error(), "trace_id": clientTraceID, "level": "INFO"})

	// An oversized x-request-id is refused, and quoted cut short.
	long := strings.Repeat("x", 300)
	if _, err := tf.generate(md(long), t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8), SamplingParams: sp}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("oversized x-request-id: %v", err)
	}
	if cut := logs.about(t, long[:256]+"..."); len(cut) != 1 || cut[0]["grpc.code"] != "InvalidArgument" {
		t.Fatalf("lines about the oversized id: %v", cut)
	}

	// Over the concurrency limit: refused by admission, logged once.
	held, cancelHeld := context.WithCancel(md("held-1"))
	defer cancelHeld()
	tf.streaming(held, t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8),
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(100), IgnoreEos: true}})
	_, err = tf.generate(md("full-1"), t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8), SamplingParams: sp})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("over the limit: %v", err)
	}
	full := logs.about(t, "full-1")
	if len(full) != 1 {
		t.Fatalf("%d lines about full-1, want 1: %v", len(full), full)
	}
	wantLine(t, full[0], map[string]string{"msg": "finished call", "grpc.code": "ResourceExhausted",
		"grpc.error": err.Error(), "trace_id": clientTraceID, "level": "WARN"})

	// Cancelled by its client while the engine stalls.
	cancelHeld()
	testutil.Eventually(t, "the cancelled request's log line", func() bool { return len(logs.find(t, "generate ended by client")) == 1 })
	gone := logs.find(t, "generate ended by client")[0]
	wantLine(t, gone, map[string]string{"request_id": "held-1", "trace_id": clientTraceID})
	testutil.Eventually(t, "the cancelled call's log line", func() bool { return len(logs.about(t, "held-1")) == 2 })
	wantLine(t, logs.about(t, "held-1")[1], map[string]string{"msg": "finished call", "grpc.code": "Canceled"})
	logs.lines(t) // every line so far holds each key once
}

// A request that fails on every worker logs lines that hold each key once.
func TestFailedRequestLogLinesHoldEachKeyOnce(t *testing.T) {
	var logs logBuffer
	f := startFleet(t, fleetOptions{
		sim:    func(_ int, c *sim.Config) { c.Faults.Unavailable = true },
		config: func(c *router.Config) { c.Logger = logs.logger() }})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-request-id", "fail-1")
	_, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("every worker down: %v", err)
	}
	failed := logs.find(t, "worker failed")
	if len(failed) == 0 {
		t.Fatal("no 'worker failed' line")
	}
	for _, l := range append(failed, logs.find(t, "request failed on every attempt")...) {
		wantLine(t, l, map[string]string{"request_id": "fail-1"})
	}
	call := logs.find(t, "finished call")
	if len(call) != 1 {
		t.Fatalf("%d 'finished call' lines, want 1", len(call))
	}
	wantLine(t, call[0], map[string]string{"request_id": "fail-1", "grpc.code": "Unavailable", "level": "WARN"})
}

// An Embed call is logged as a generation is: "embed done" and the call's
// line name it by its x-request-id, in its trace; one refused by
// admission (while a stalled Embed holds the only place) or by
// validation has the call's line alone.
func TestEmbedRequestLogLines(t *testing.T) {
	var logs logBuffer
	tf := startTracedFleet(t, fleetOptions{workers: 1, config: func(c *router.Config) {
		c.Logger = logs.logger()
		c.Admission.MaxConcurrentRequests, c.Admission.QueueSize = 1, 0
		c.Reliability.FirstTokenTimeout = 0
	}})
	md := func(id string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "x-request-id", id, "traceparent", traceparent)
	}
	in := []*kvgatev1.EmbedInput{{InputIds: prompt(1, 8)}}
	if _, err := tf.router.Embed(md("emb-done"), &kvgatev1.EmbedRequest{Inputs: in}); err != nil {
		t.Fatal(err)
	}
	call := logs.about(t, "emb-done")
	if len(call) != 2 || call[0]["msg"] != "embed done" || call[1]["msg"] != "finished call" {
		t.Fatalf("lines about emb-done: %v, want 'embed done' and 'finished call'", call)
	}
	wantLine(t, call[0], map[string]string{"inputs": "1", "prompt_tokens": "8", "trace_id": clientTraceID})
	wantLine(t, call[1], map[string]string{"grpc.method": "Embed", "grpc.code": "OK"})

	if _, err := tf.router.Embed(md("emb-bad"), &kvgatev1.EmbedRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an empty batch: %v", err)
	}
	if bad := logs.about(t, "emb-bad"); len(bad) != 1 || bad[0]["grpc.code"] != "InvalidArgument" {
		t.Fatalf("lines about emb-bad: %v, want the call's line with InvalidArgument", bad)
	}

	tf.sims[0].Engine().SetFaults(sim.Faults{StallBeforeFirstToken: true})
	held, cancelHeld := context.WithCancel(md("emb-held"))
	heldDone := make(chan error, 1)
	go func() {
		_, err := tf.router.Embed(held, &kvgatev1.EmbedRequest{Inputs: in})
		heldDone <- err
	}()
	testutil.Eventually(t, "the stalled Embed holding the only place", func() bool {
		return counter(t, tf.fleet, "kvgate_worker_selections_total") == 2
	})
	_, err := tf.router.Embed(md("emb-full"), &kvgatev1.EmbedRequest{Inputs: in})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("over the limit: %v", err)
	}
	if full := logs.about(t, "emb-full"); len(full) != 1 || full[0]["grpc.code"] != "ResourceExhausted" {
		t.Fatalf("lines about emb-full: %v, want the call's line with ResourceExhausted", full)
	}
	cancelHeld()
	if err := <-heldDone; status.Code(err) != codes.Canceled {
		t.Fatalf("the cancelled Embed: %v", err)
	}
	logs.lines(t)
}

// A request's log lines say why its worker was chosen, though cache_aware
// builds that sentence only when it is asked for.
func TestRequestLogLinesSayWhy(t *testing.T) {
	var logs logBuffer
	f := startFleet(t, fleetOptions{workers: 2, policy: "cache_aware", config: func(c *router.Config) { c.Logger = logs.logger() }})
	f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 64), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}})
	done := logs.find(t, "generate done")
	if len(done) != 1 {
		t.Fatalf("%d 'generate done' lines, want 1", len(done))
	}
	if why, _ := done[0]["decision"].(string); why == "" {
		t.Fatalf("the line has no decision: %v", done[0])
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/workers/sim"
)

// The OpenAI-compatible front is tested as its users use it: real HTTP
// over loopback to `kvgate serve --http-port`, whose requests pass the
// router's gRPC pipeline to simulated engines that answer scripted text.

const (
	thinkThenAnswer = "<think>\nThe user wants the capital of France.\n</think>\n\nThe capital of France is Paris."
	thinkThenCall   = "<think>\nCall get_weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>"
	jsonAnswer      = `{"name": "Ada", "age": 36}`
)

// httpRouter is a running `kvgate serve` with its HTTP front.
type httpRouter struct {
	url    string
	sims   []*sim.Process
	client *http.Client // http.DefaultClient unless the test sets one
	stop   func()       // stops the router (and flushes its spans); idempotent
}

// startHTTPRouter starts two scripted simulated engines and `kvgate serve`
// in front of them with --http-port 0 and the extra flags given.
func startHTTPRouter(t testing.TB, extra ...string) *httpRouter {
	t.Helper()
	hr := &httpRouter{}
	var urls []string
	for i := range 2 {
		sc := sim.DefaultConfig()
		sc.TimeScale = 0
		sc.Seed = int64(i)
		sc.EmbeddingDim = 8
		sc.Scripts = []sim.Script{{When: "capital of France", Text: thinkThenAnswer}, {When: "weather in Paris", Text: thinkThenCall},
			{When: "Describe Ada", Text: jsonAnswer}}
		s, err := sim.Start(sc, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		hr.sims = append(hr.sims, s)
		urls = append(urls, "grpc://"+s.Addr())
	}
	args := append([]string{"--port", "0", "--prometheus-port", "-1", "--http-port", "0", "--worker-urls", strings.Join(urls, ","),
		"--wait-for-workers", "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes"}, extra...)
	cfg := defaults(t, args...)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan listening, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.DiscardHandler), func(l listening) { ready <- l }) }()
	var once sync.Once
	hr.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
	t.Cleanup(hr.stop)
	hr.client = http.DefaultClient
	scheme := "http://"
	if slices.Contains(extra, "--tls-cert-file") {
		scheme = "https://"
	}
	select {
	case l := <-ready:
		hr.url = scheme + l.http
	case err := <-done:
		t.Fatalf("serve ended early: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not become ready")
	}
	return hr
}

// post sends body as JSON to path with headers, and returns the response;
// its body is closed when the test ends.
func (hr *httpRouter) post(t *testing.T, path, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, hr.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := hr.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// decode reads a JSON response body into a generic value.
func decode(t *testing.T, r io.Reader) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.NewDecoder(r).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// sseEvents reads a server-sent event stream to its end: the data of each
// event, and whether it ended with [DONE].
func sseEvents(t *testing.T, r io.Reader) (events []map[string]any, done bool) {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		if done {
			t.Fatalf("event after [DONE]: %s", data)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		events = append(events, v)
	}
	return events, done
}

// path reads a nested value: path(v, "choices", 0, "message", "content").
func path(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func jsonBody(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"
)

// openAIPaths are the endpoints FuzzOpenAIRequest posts to, by the
// input's first byte.
var openAIPaths = [...]string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/generate"}

// httpHeaders are the request headers the front reads or passes on,
// which FuzzOpenAIRequest sets one of.
var httpHeaders = []string{"Authorization", "X-Request-Id", "X-Routing-Key", "X-Target-Worker", "Kvgate-Priority",
	"X-Smg-Routing-Key", "X-Smg-Target-Worker", "Traceparent", "Tracestate", "X-Forwarded-For", "Content-Type"}

// FuzzOpenAIRequest posts any body to the OpenAI-compatible front of a
// router over two healthy simulated engines, as a hostile client may, with
// one of the headers it reads (httpHeaders) set to any value. Whatever
// the body, the answer is a client error in OpenAI's shape (4xx, or 501 for
// what kvgate does not do, with a message and a type), or a success: a JSON
// object, or for a stream, events that end with [DONE]. Never another 5xx
// (the engines are healthy: a failure there is the router's, or a client's
// mistake it took for its own), a hang, or a stream cut short.
//
//	go test -run '^$' -fuzz FuzzOpenAIRequest -fuzztime 5m ./cmd/kvgate/
func FuzzOpenAIRequest(f *testing.F) {
	hr := startHTTPRouter(f, "--max-request-bytes", "65536")
	const user = `"messages": [{"role": "user", "content": "What is the capital of France?"}]`
	for _, s := range []struct {
		path uint8
		body string
	}{
		{0, `{"max_tokens": 4, ` + user + `}`},
		{0, `{"max_tokens": 4, "stream": true, "stream_options": {"include_usage": true}, ` + user + `}`},
		{0, `{"max_tokens": 8, "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}], "tool_choice": "auto", "messages": [{"role": "user", "content": "weather in Paris"}]}`},
		{0, `{"max_tokens": 8, "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object", "properties": {"name": {"type": "string"}}}}}, "messages": [{"role": "user", "content": "Describe Ada"}]}`},
		{0, `{"max_tokens": 3, "logprobs": true, "top_logprobs": 2, "temperature": 0.5, "top_p": 0.9, "seed": 7, "stop": ["\n"], ` + user + `}`},
		{0, `{"messages": [{"role": "system", "content": [{"type": "text", "text": "be brief"}]}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "2"}], "max_tokens": 2}`},
		{0, `{"temperature": "hot", ` + user + `}`},
		{0, `{"max_tokens": 4294967296, "priority": -1001, ` + user + `}`},
		{0, `{"messages": [{"role": "user", "content": 5}], "n": 2}`},
		{1, `{"prompt": "hi", "max_tokens": 3, "echo": false, "logprobs": 2}`},
		{1, `{"prompt": [1, 2, 3], "max_tokens": 2, "stream": true}`},
		{1, `{"prompt": [4000000000]}`},
		{1, `{"prompt": ["a", "b"], "best_of": 3}`},
		{2, `{"input": "a sentence"}`},
		{2, `{"input": [[1, 2], [3]], "encoding_format": "base64"}`},
		{2, `{"input": "a", "dimensions": 4}`},
		{3, `{"text": "hi", "sampling_params": {"max_new_tokens": 3, "temperature": 0}}`},
		{3, `{"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}, "stream": true}`},
		{3, `{"input_ids": [[1, 2], [3]]}`},
		{0, ``},
		{1, `[1, 2]`},
		{2, `{"input": `},
		{3, `null`},
	} {
		f.Add(s.path, []byte(s.body), uint8(0), "")
	}
	for i, v := range []string{"Bearer sk-x", "req-7", "user-42", "1", "-5", "user-42", "0",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=x", "10.0.0.1", "caf\xc3\xa9"} {
		f.Add(uint8(1), []byte(`{"prompt": "hi", "max_tokens": 2}`), uint8(i), v)
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte, header uint8, value string) {
		path := openAIPaths[int(which)%len(openAIPaths)]
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, hr.url+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		key := httpHeaders[int(header)%len(httpHeaders)]
		if !httpguts.ValidHeaderFieldValue(value) {
			return // not a value an HTTP client sends
		}
		req.Header.Set(key, value)
		resp, err := hr.client.Do(req)
		if err != nil {
			t.Fatalf("POST %s %q, %s: %q: %v", path, body, key, value, err)
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("POST %s %q: status %d, body cut: %v", path, body, resp.StatusCode, err)
		}
		switch {
		case resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented:
			t.Fatalf("POST %s %q, %s: %q: status %d, a server error for a client's request: %s", path, body, key, value, resp.StatusCode, got)
		case resp.StatusCode >= 400:
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if err := json.Unmarshal(got, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("POST %s %q: status %d without an OpenAI error (message and type): %s", path, body, resp.StatusCode, got)
			}
		case resp.StatusCode != http.StatusOK:
			t.Fatalf("POST %s %q: status %d: %s", path, body, resp.StatusCode, got)
		case strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"):
			checkEvents(t, path, body, got)
		default:
			var v map[string]any
			if err := json.Unmarshal(got, &v); err != nil {
				t.Fatalf("POST %s %q: 200 without a JSON object: %v: %s", path, body, err, got)
			}
		}
	})
}

// checkEvents checks a streamed answer: every event is a JSON object or
// the final [DONE], which ends it. An error met mid-stream is sent as an
// event of its own (OpenAI's shape), which must be a client's.
func checkEvents(t *testing.T, path string, body, got []byte) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(got))
	sc.Buffer(nil, 1<<20)
	done := false
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if done {
			t.Fatalf("POST %s %q: an event after [DONE]: %s", path, body, got)
		}
		if line == "[DONE]" {
			done = true
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("POST %s %q: an event that is not a JSON object: %q", path, body, line)
		}
		if e, ok := v["error"].(map[string]any); ok && e["type"] == "server_error" {
			t.Fatalf("POST %s %q: a server error mid-stream: %s", path, body, line)
		}
	}
	if !done && !bytes.Contains(got, []byte(`"error"`)) {
		t.Fatalf("POST %s %q: a stream that does not end with [DONE]: %s", path, body, got)
	}
}

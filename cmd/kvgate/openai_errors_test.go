package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers/sim"
)

// Every mistake is answered in OpenAI's error shape with the HTTP status
// its SDKs map to an exception class, naming the field at fault; the
// router's own refusals keep their message.
func TestOpenAIErrors(t *testing.T) {
	hr := startHTTPRouter(t, "--api-key", "sk-right", "--max-request-bytes", "65536")
	const user = `"messages": [{"role": "user", "content": "hi"}]`
	for _, tc := range []struct {
		name, path, body, key string
		status                int
		param                 string // "": none expected
		message               string // a part of the message
	}{
		{"no API key", "/v1/chat/completions", `{` + user + `}`, "", 401, "", ""},
		{"wrong API key", "/v1/chat/completions", `{` + user + `}`, "sk-wrong", 401, "", ""},
		{"bad JSON", "/v1/chat/completions", `{"messages": [`, "sk-right", 400, "", "not valid JSON"},
		{"not an object", "/v1/chat/completions", `[1, 2]`, "sk-right", 400, "", "JSON object"},
		{"empty body", "/v1/chat/completions", ``, "sk-right", 400, "", "empty"},
		{"not UTF-8", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"caf\xe9\"}]}", "sk-right", 400, "", "not valid UTF-8 (at byte 46)"},
		{"not UTF-8 in a schema passed on as text", "/v1/chat/completions", "{\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"\": \"\xef\"}}}, " + user + "}", "sk-right", 400, "", "UTF-8"},
		{"a number of the wrong type", "/v1/chat/completions", `{"temperature": "hot", ` + user + `}`, "sk-right", 400, "temperature", "temperature"},
		{"a negative token bound", "/v1/chat/completions", `{"max_tokens": -1, ` + user + `}`, "sk-right", 400, "max_tokens", "max_tokens"},
		{"content of the wrong type", "/v1/chat/completions", `{"messages": [{"role": "user", "content": 5}]}`, "sk-right", 400, "messages.content", "content"},
		{"an image part", "/v1/chat/completions", `{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}`, "sk-right", 400, "messages.content", "image_url"},
		{"stop of the wrong type", "/v1/chat/completions", `{"stop": 3, ` + user + `}`, "sk-right", 400, "stop", "stop"},
		{"tool_choice unknown", "/v1/chat/completions", `{"tool_choice": "sometimes", ` + user + `}`, "sk-right", 400, "tool_choice", "sometimes"},
		{"n above 1", "/v1/chat/completions", `{"n": 2, ` + user + `}`, "sk-right", 400, "n", "n must be 1"},
		{"no messages", "/v1/chat/completions", `{"messages": []}`, "sk-right", 400, "messages", "messages"},
		{"the router's range check", "/v1/chat/completions", `{"temperature": -1, ` + user + `}`, "sk-right", 400, "", "temperature"},
		{"unknown model", "/v1/chat/completions", `{"model": "no-such-model", ` + user + `}`, "sk-right", 404, "", "no-such-model"},
		{"priority out of range", "/v1/chat/completions", `{"priority": 5000, ` + user + `}`, "sk-right", 400, "priority", "-1000 to 1000"},
		{"priority of the wrong type", "/v1/chat/completions", `{"priority": "high", ` + user + `}`, "sk-right", 400, "priority", "priority"},
		{"a priority in range is served", "/v1/completions", `{"priority": -3, "max_tokens": 1, "prompt": "hi"}`, "sk-right", 200, "", ""},
		{"unknown fields are ignored", "/v1/chat/completions", `{"frobnicate": {"x": 1}, "max_tokens": 1, ` + user + `}`, "sk-right", 200, "", ""},
		{"body over --max-request-bytes", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "` + strings.Repeat("a", 70000) + `"}]}`, "sk-right", 413, "", "65536"},
		{"several prompts", "/v1/completions", `{"prompt": ["a", "b"]}`, "sk-right", 400, "prompt", "2 prompts"},
		{"prompt of the wrong type", "/v1/completions", `{"prompt": {"a": 1}}`, "sk-right", 400, "prompt", "prompt"},
		{"token id out of the vocabulary", "/v1/completions", `{"prompt": [4000000000]}`, "sk-right", 400, "", ""},
		{"embedding dimensions", "/v1/embeddings", `{"input": "a", "dimensions": 4}`, "sk-right", 400, "dimensions", "dimensions"},
		{"generate batch", "/generate", `{"input_ids": [[1, 2], [3]]}`, "sk-right", 400, "input_ids", "batch"},
		{"generate without a prompt", "/generate", `{"sampling_params": {}}`, "sk-right", 400, "text", "input_ids"},
		{"unknown path", "/v1/responses", `{}`, "sk-right", 404, "", "/v1/responses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var headers []string
			if tc.key != "" {
				headers = []string{"Authorization", "Bearer " + tc.key}
			}
			resp := hr.post(t, tc.path, tc.body, headers...)
			v := decode(t, resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %v", resp.StatusCode, tc.status, v)
			}
			if tc.status == 200 {
				return
			}
			msg, _ := path(v, "error", "message").(string)
			typ, _ := path(v, "error", "type").(string)
			if msg == "" || typ == "" || !strings.Contains(msg, tc.message) {
				t.Errorf("error %v, want a message containing %q and a type", v, tc.message)
			}
			if p, _ := path(v, "error", "param").(string); p != tc.param {
				t.Errorf("param %q, want %q (%s)", p, tc.param, msg)
			}
		})
	}
}

// The HTTP headers reach the router as the gRPC metadata a gRPC client
// would send: the request id (echoed back as a response header) and the
// routing headers in kvgate's and SMG's spellings (consistent_hashing
// reads the target worker as an index).
func TestOpenAIForwardsHeaders(t *testing.T) {
	hr := startHTTPRouter(t, "--policy", "consistent_hashing")
	resp := hr.post(t, "/v1/chat/completions", `{"max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}`, "x-request-id", "trace-me-1")
	v := decode(t, resp.Body)
	if got := resp.Header.Get("X-Request-Id"); got != "trace-me-1" || v["id"] != "chatcmpl-trace-me-1" {
		t.Errorf("X-Request-Id %q and id %v, want the client's trace-me-1", got, v["id"])
	}
	resp = hr.post(t, "/v1/completions", `{"max_tokens": 1, "prompt": "hi", "stream": true}`)
	events, _ := sseEvents(t, resp.Body)
	if id := resp.Header.Get("X-Request-Id"); id == "" || len(events) == 0 || events[0]["id"] != "cmpl-"+id {
		t.Errorf("a request without x-request-id: header %q, first event %v", id, events)
	}
	for _, header := range []string{"x-target-worker", "x-smg-target-worker"} {
		for i, s := range hr.sims {
			want := "grpc://" + s.Addr()
			resp := hr.post(t, "/generate", `{"text": "hi", "sampling_params": {"max_new_tokens": 1}}`, header, strconv.Itoa(i))
			if got := path(decode(t, resp.Body), "meta_info", "worker"); got != want {
				t.Errorf("%s: %s served, want %s", header, got, want)
			}
		}
	}
}

// The router sees each HTTP client's own address as its peer: with a rate
// limit per client, one client spending its budget leaves another's
// intact (were every HTTP request one in-memory peer, both would share it).
func TestOpenAIRateLimitsEachClient(t *testing.T) {
	hr := startHTTPRouter(t, "--rate-limit-per-key", "1")
	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	send := func(c *http.Client) int {
		t.Helper()
		resp, err := c.Post(hr.url+"/v1/completions", "application/json", strings.NewReader(`{"max_tokens": 1, "prompt": "hi"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	a, b := from("127.0.0.1"), from("127.0.0.2")
	limited := false
	for range 3 {
		if send(a) == http.StatusTooManyRequests {
			limited = true
			break
		}
	}
	if !limited {
		t.Fatal("client A was never limited at 1 request per second")
	}
	if got := send(b); got != http.StatusOK {
		t.Errorf("client B got %d after A was limited, want 200", got)
	}
}

// A client that goes away mid-stream ends the engine's request (nothing
// keeps generating for nobody), and an engine failing mid-stream reaches
// the client as an error event in OpenAI's shape, without [DONE].
func TestOpenAIStreamEnds(t *testing.T) {
	hr := startHTTPRouter(t)
	for _, s := range hr.sims {
		s.Engine().SetFaults(sim.Faults{StallAfterTokens: 2})
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hr.url+"/v1/chat/completions",
		strings.NewReader(`{"stream": true, "max_tokens": 50, "messages": [{"role": "user", "content": "What is the capital of France?"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := resp.Body.Read(buf); err != nil { // the stream has begun
		t.Fatal(err)
	}
	if running(hr) != 1 {
		t.Fatalf("%d requests running on the engines, want the stalled one", running(hr))
	}
	cancel()
	resp.Body.Close()
	testutil.Eventually(t, "the engine's request to end after the client left", func() bool { return running(hr) == 0 })

	for _, s := range hr.sims {
		s.Engine().SetFaults(sim.Faults{DropAfterTokens: 2})
	}
	resp = hr.post(t, "/v1/chat/completions", `{"stream": true, "max_tokens": 50, "messages": [{"role": "user", "content": "What is the capital of France?"}]}`)
	events, done := sseEvents(t, resp.Body)
	if done || len(events) == 0 {
		t.Fatalf("%d events, done=%v: want an error event and no [DONE]", len(events), done)
	}
	last := events[len(events)-1]
	if msg, _ := path(last, "error", "message").(string); msg == "" {
		t.Errorf("the last event is not an error: %v", last)
	}
}

// running counts the requests the engines are running.
func running(hr *httpRouter) int {
	n := 0
	for _, s := range hr.sims {
		n += s.Engine().Stats().Running
	}
	return n
}

// The request's priority reaches the router's queue: the kvgate-priority
// header is forwarded as metadata (the router checks it), and the body's
// priority takes its place.
func TestOpenAIPriority(t *testing.T) {
	hr := startHTTPRouter(t)
	const body = `"max_tokens": 1, "prompt": "hi"`
	for _, tc := range []struct {
		name, body, header string
		status             int
	}{
		{"a header the router refuses", `{` + body + `}`, "high", 400},
		{"a header in range", `{` + body + `}`, "-7", 200},
		{"the body's priority over the header", `{"priority": 3, ` + body + `}`, "high", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := hr.post(t, "/v1/completions", tc.body, "kvgate-priority", tc.header)
			v := decode(t, resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %v", resp.StatusCode, tc.status, v)
			}
			if msg, _ := path(v, "error", "message").(string); tc.status == 400 && !strings.Contains(msg, "kvgate-priority") {
				t.Errorf("message %q does not name kvgate-priority", msg)
			}
		})
	}
}

// TestOpenAISlowBodyIsCut: a client that sends its headers and then
// stalls on its body is answered 408, naming the bound, within
// --request-read-timeout; it holds no connection for longer. The bound
// is on the body's arrival only: the answer after it may stream as long
// as it needs.
func TestOpenAISlowBodyIsCut(t *testing.T) {
	hr := startHTTPRouter(t, "--request-read-timeout", "300ms")
	conn, err := net.Dial("tcp", strings.TrimPrefix(hr.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /v1/completions HTTP/1.1\r\nHost: kvgate\r\nContent-Type: application/json\r\n"+
		"Content-Length: 100\r\n\r\n{\"prompt\": "); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil { // the test's own bound
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	defer resp.Body.Close()
	v := decode(t, resp.Body)
	if msg, _ := path(v, "error", "message").(string); resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(msg, "300ms") {
		t.Fatalf("status %d: %v; want 408 naming the bound", resp.StatusCode, v)
	}
	// A request whose body arrives in time is served on another connection.
	if ok := hr.post(t, "/v1/completions", `{"prompt": "hi", "max_tokens": 2}`); ok.StatusCode != http.StatusOK {
		t.Fatalf("a whole request: status %d: %v", ok.StatusCode, decode(t, ok.Body))
	}
}

// A client that reads a streamed answer's headers and then stops reading is
// cut loose once a write to it has waited --stream-send-timeout, over
// HTTP/1.1 and HTTP/2 alike: the engine's request ends long before its
// tokens do, and the answer is cut mid-stream (the connection closed, the
// HTTP/2 stream reset). A handler blocked in its write would have finished
// the answer, with an error event, once the client read again.
func TestOpenAIClientThatStopsReadingIsCut(t *testing.T) {
	const tokens = 120_000 // far more than the clients' buffers hold unread
	dir := t.TempDir()
	ca := testutil.NewCA(t, "server-ca")
	srvCert, srvKey := ca.Issue(t, 2, true)
	for _, tc := range []struct {
		name  string
		proto string
		args  []string
		tr    *http.Transport
	}{
		{"HTTP/1.1", "HTTP/1.1", nil, &http.Transport{}},
		{"HTTP/2", "HTTP/2.0", []string{"--tls-cert-file", testutil.WriteFile(t, dir, "cert.pem", srvCert),
			"--tls-key-file", testutil.WriteFile(t, dir, "key.pem", srvKey)},
			&http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hr := startHTTPRouter(t, append([]string{"--stream-send-timeout", "300ms"}, tc.args...)...)
			hr.client = &http.Client{Transport: tc.tr}
			defer tc.tr.CloseIdleConnections()
			resp := hr.post(t, "/v1/completions", `{"prompt": "hi", "stream": true, "ignore_eos": true, "max_tokens": `+strconv.Itoa(tokens)+`}`)
			if resp.StatusCode != http.StatusOK || resp.Proto != tc.proto {
				t.Fatalf("%s %d: %v", resp.Proto, resp.StatusCode, decode(t, resp.Body))
			}
			// The client reads no more until the engine's request has ended.
			testutil.EventuallyState(t, testutil.Patience, "the engine's request to end", func() (bool, string) {
				var running, requests, generated int
				for _, s := range hr.sims {
					st := s.Engine().Stats()
					running, requests, generated = running+st.Running, requests+int(st.Requests), generated+int(st.GeneratedTokens)
				}
				return running == 0 && requests == 1, "running " + strconv.Itoa(running) + " of " + strconv.Itoa(requests) + " requests, " +
					strconv.Itoa(generated) + " tokens generated"
			})
			var generated uint64
			for _, s := range hr.sims {
				generated += s.Engine().Stats().GeneratedTokens
			}
			if generated >= tokens {
				t.Fatalf("the engines generated all %d tokens: the stalled client did not stop them", generated)
			}
			done := make(chan struct{})
			var rest []byte
			var err error
			go func() {
				defer close(done)
				rest, err = io.ReadAll(resp.Body)
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second): // the test's own bound
				t.Fatal("the stalled answer, read again, did not end")
			}
			if err == nil {
				t.Fatalf("after %d bytes the answer ended whole; want it cut mid-stream", len(rest))
			}
			if strings.Contains(string(rest), "[DONE]") {
				t.Fatal("the stalled stream completed")
			}
			// Other clients are served.
			if ok := hr.post(t, "/v1/completions", `{"prompt": "hi", "max_tokens": 2}`); ok.StatusCode != http.StatusOK {
				t.Fatalf("a request after the stalled one: status %d: %v", ok.StatusCode, decode(t, ok.Body))
			}
		})
	}
}

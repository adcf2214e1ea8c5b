package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
)

// TestQuickStart follows README's quick start as a newcomer would: it starts
// the router its first command starts (that command's flags, on free ports,
// without the simulated delays), then runs every command of the next block,
// in order, against it, and checks what each command's comment claims
// against what the command printed:
//
//   - "key": value: some object of the output has key with that value;
//     with "on that worker", the entry of the worker that served the last
//     request has it;
//   - no "key": nothing in the output has key;
//   - "the same worker": served by the worker that served the one before.
//
// Beyond the comments, it holds the quick start to what it is for: the
// engines echo (each answer's text is the last user message sent), the
// startup log says so and gives the page size the prose quotes, and a
// repeated prompt shows a cache hit in the gRPC usage, in Explain and in the
// OpenAI front's usage.
func TestQuickStart(t *testing.T) {
	section := docSection(t, "../../README.md", "## Quick start")
	blocks := shellBlocks(section)
	if len(blocks) != 2 {
		t.Fatalf("README's quick start has %d sh blocks; this test knows two (set-up, then calls)", len(blocks))
	}

	// The set-up block: the router on its embedded default, then the tests.
	setup, err := shellCommands(blocks[0], map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if len(setup) != 2 || strings.Join(setup[1].stages[0], " ") != "make test" {
		t.Fatalf("the set-up block is %d commands; want `go run ./cmd/kvgate serve ...` and `make test`", len(setup))
	}
	serveArgs, ok := cutPrefixWords(setup[0].stages[0], "go", "run", "./cmd/kvgate", "serve")
	if !ok {
		t.Fatalf("the first command is %q; want go run ./cmd/kvgate serve", setup[0].line)
	}
	documented := defaults(t, serveArgs...)
	if len(documented.workerURLs) != 0 {
		t.Fatalf("the quick start names workers (%v); it is about the embedded default", documented.workerURLs)
	}
	cfg := defaults(t, append(serveArgs, "--port", "0", "--prometheus-port", "0", "--http-port", "0", "--embedded-time-scale", "0")...)
	logs := &testutil.Logs{Level: slog.LevelInfo}
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan listening, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, logs.Logger(), func(l listening) { addrs <- l }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	var l listening
	select {
	case l = <-addrs:
	case err := <-done:
		t.Fatalf("serve ended early: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not become ready")
	}

	// The log says what the engines are, and the page size the prose quotes.
	var notice *slog.Record
	for _, r := range logs.Records(slog.LevelInfo) {
		if strings.Contains(r.Message, "the embedded engines are simulated: they echo the last user message") {
			notice = &r
		}
	}
	if notice == nil {
		t.Fatal("no log line says the embedded engines are simulated and echo")
	}
	page, _ := testutil.Attr(*notice, "page_size")
	if want := fmt.Sprintf("pages of %d tokens", page.Int64()); !strings.Contains(section, want) {
		t.Errorf("the quick start does not say %q, the page size the log gives", want)
	}
	if !strings.Contains(section, "the embedded engines are simulated: they echo the last user message") {
		t.Error("the quick start does not quote the log line that says the engines echo")
	}

	ports := map[int]string{documented.port: l.grpc, documented.promPort: l.metrics, documented.http.port: l.http}
	runner := shellRunner{addr: func(hostport string) (string, error) {
		host, p, err := net.SplitHostPort(hostport)
		n, _ := strconv.Atoi(p)
		if err != nil || (host != "localhost" && host != "127.0.0.1") || ports[n] == "" {
			return "", fmt.Errorf("%s is not an address the quick start's router serves", hostport)
		}
		return ports[n], nil
	}}
	cmds, err := shellCommands(blocks[1], map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	var worker string
	hits := map[string]bool{} // usage keys seen above zero
	for _, c := range cmds {
		out, err := runner.run(rctx, c)
		if err != nil {
			t.Fatalf("%s: %v", c.line, err)
		}
		vals := jsonValues(out)
		served := ""
		for _, v := range vals {
			walkJSON(v, func(o map[string]any) {
				if w, ok := o["worker"].(string); ok && served == "" {
					served = w
				}
				for _, k := range []string{"cachedTokens", "cached_tokens", "matchedTokens"} {
					if n, ok := o[k].(float64); ok && n > 0 {
						hits[k] = true
					}
				}
			})
		}
		checkEcho(t, c, vals)
		checkClaims(t, c, vals, worker, served)
		if served != "" && !strings.HasSuffix(c.stages[0][len(c.stages[0])-1], "/Explain") {
			worker = served
		}
	}
	for _, k := range []string{"cachedTokens", "matchedTokens"} {
		if !hits[k] {
			t.Errorf("no quick-start command shows %s above zero: the quick start must show a cache hit", k)
		}
	}
	if strings.Contains(blocks[1], "/v1/") && !hits["cached_tokens"] {
		t.Error("the quick start calls the OpenAI front but shows no cached_tokens above zero")
	}
}

// shellBlocks returns the bodies of the ```sh blocks of a markdown section.
func shellBlocks(section string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		out = append(out, m[1])
	}
	return out
}

// cutPrefixWords returns words after prefix, if words start with it.
func cutPrefixWords(words []string, prefix ...string) ([]string, bool) {
	if len(words) < len(prefix) || !reflect.DeepEqual(words[:len(prefix)], prefix) {
		return nil, false
	}
	return words[len(prefix):], true
}

// checkEcho: a command that sends chat messages gets the last user message
// back as the answer's text (gRPC's "text", OpenAI's "content").
func checkEcho(t *testing.T, c shellCommand, vals []any) {
	t.Helper()
	body := ""
	for i, w := range c.stages[0] {
		if w == "-d" && i+1 < len(c.stages[0]) {
			body = c.stages[0][i+1]
		}
	}
	var req struct {
		Messages []struct{ Role, Content string } `json:"messages"`
	}
	if json.Unmarshal([]byte(body), &req) != nil || len(req.Messages) == 0 {
		return // not a chat, or Explain's {"chat": ...}, which answers nothing
	}
	want := ""
	for _, m := range req.Messages {
		if m.Role == "user" {
			want = m.Content
		}
	}
	answered := false
	for _, v := range vals {
		walkJSON(v, func(o map[string]any) {
			for _, k := range []string{"text", "content"} {
				if s, ok := o[k].(string); ok {
					answered = true
					if s != want {
						t.Errorf("%s: the answer is %q; the engines echo, so want %q", c.line, s, want)
					}
				}
			}
		})
	}
	if !answered {
		t.Errorf("%s: no answer text in the output", c.line)
	}
}

// checkClaims checks what a command's comment says against its output.
func checkClaims(t *testing.T, c shellCommand, vals []any, before, served string) {
	t.Helper()
	if c.comment == "" {
		return
	}
	if len(vals) == 0 && strings.Contains(c.comment, `"`) {
		t.Errorf("%s: the comment makes claims about JSON, but the output is not JSON", c.line)
		return
	}
	if strings.Contains(c.comment, "the same worker") && (served == "" || served != before) {
		t.Errorf("%s: served by %q, the one before by %q; the comment says the same worker", c.line, served, before)
	}
	onThatWorker := strings.Contains(c.comment, "on that worker")
	for _, m := range regexp.MustCompile(`(no )?"(\w+)"(?:: ("[^"]*"|-?[0-9.]+))?`).FindAllStringSubmatch(c.comment, -1) {
		negated, key, literal := m[1] != "", m[2], m[3]
		var want any
		if literal != "" {
			if err := json.Unmarshal([]byte(literal), &want); err != nil {
				t.Fatalf("%s: claim %s: %v", c.line, m[0], err)
			}
		}
		found, matched := false, false
		for _, v := range vals {
			walkJSON(v, func(o map[string]any) {
				if onThatWorker && literal != "" && o["address"] != nil && o["address"] != before {
					return
				}
				got, ok := o[key]
				if !ok {
					return
				}
				found = true
				if literal == "" || reflect.DeepEqual(got, want) {
					matched = true
				}
			})
		}
		switch {
		case negated && found:
			t.Errorf("%s: the comment says %s, but the output has it", c.line, m[0])
		case !negated && literal == "":
			// a bare "key" is prose, not a claim
		case !negated && !matched:
			t.Errorf("%s: the comment says %s, but the output does not have it", c.line, m[0])
		}
	}
}

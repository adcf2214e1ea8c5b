package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestPprofAddrLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "10.1.2.3:0", "example.com:0", "127.0.0.1"} {
		lis, err := listenPprof(addr)
		if err == nil {
			lis.Close()
			t.Errorf("listenPprof(%q) listens on %s; want it refused", addr, lis.Addr())
			continue
		}
		if !strings.Contains(err.Error(), "--pprof-addr") {
			t.Errorf("listenPprof(%q): %v; want an error naming --pprof-addr", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "127.0.0.2:0"} {
		lis, err := listenPprof(addr)
		if err != nil {
			t.Errorf("listenPprof(%q): %v", addr, err)
			continue
		}
		lis.Close()
	}
}

// TestServePprof: serve with --pprof-addr answers /debug/pprof/ and its
// profiles; without it there is no endpoint; a non-loopback address stops
// serve with the reason.
func TestServePprof(t *testing.T) {
	err := run(context.Background(), []string{"serve", "--port", "0", "--prometheus-port", "-1", "--pprof-addr", "0.0.0.0:6060"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("serve --pprof-addr 0.0.0.0:6060: err = %v, want a refusal mentioning loopback", err)
	}

	for _, on := range []bool{true, false} {
		args := []string{"--port", "0", "--prometheus-port", "-1", "--embedded-time-scale", "0"}
		if on {
			args = append(args, "--pprof-addr", "127.0.0.1:0")
		}
		cfg := defaults(t, args...)
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan listening, 1)
		done := make(chan error, 1)
		go func() { done <- serve(ctx, cfg, slog.New(slog.DiscardHandler), func(l listening) { ready <- l }) }()
		var l listening
		select {
		case l = <-ready:
		case err := <-done:
			t.Fatalf("serve ended early: %v", err)
		case <-time.After(20 * time.Second):
			t.Fatal("serve did not become ready")
		}
		if !on {
			if l.pprof != "" {
				t.Errorf("without --pprof-addr, pprof serves on %s", l.pprof)
			}
		} else {
			for path, want := range map[string]string{
				"/debug/pprof/":                  "goroutine",
				"/debug/pprof/heap?debug=1":      "heap profile",
				"/debug/pprof/cmdline":           "",
				"/debug/pprof/goroutine?debug=1": "goroutine profile",
			} {
				resp, err := http.Get("http://" + l.pprof + path)
				if err != nil {
					t.Fatalf("GET %s: %v", path, err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
					t.Errorf("GET %s: %s, body %.200q; want 200 with %q", path, resp.Status, body, want)
				}
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}
}

package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/metricsdoc"
	"github.com/kvgate/kvgate/internal/testutil"
)

// defaults parses no flags, so the test starts from exactly what a user gets.
func defaults(t testing.TB, args ...string) serveConfig {
	t.Helper()
	var cfg serveConfig
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	cfg.register(fs)
	if err := fs.Parse(joinMultiValues(args, multiValueFlags...)); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestDefaultsMatchTheDocumentation(t *testing.T) {
	cfg := defaults(t)
	if cfg.host != "127.0.0.1" || cfg.port != 30000 || cfg.promHost != "127.0.0.1" || cfg.promPort != 29000 {
		t.Fatalf("listen defaults %s:%d metrics %s:%d, want 127.0.0.1:30000 and 127.0.0.1:29000",
			cfg.host, cfg.port, cfg.promHost, cfg.promPort)
	}
	if cfg.embeddedWorkers != 2 || len(cfg.workerURLs) != 0 {
		t.Fatalf("embedded default: %d workers, urls %v", cfg.embeddedWorkers, cfg.workerURLs)
	}
}

// TestEmbeddedDefaultServesGenerateAndMetrics runs `kvgate serve` as a newcomer
// would, with no workers given, on free ports, and calls it.
func TestEmbeddedDefaultServesGenerateAndMetrics(t *testing.T) {
	cfg := defaults(t, "--port", "0", "--prometheus-port", "0", "--embedded-time-scale", "0")
	logs := &testutil.Logs{Level: slog.LevelInfo}
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, cfg, logs.Logger(), func(l listening) { addrs <- [2]string{l.grpc, l.metrics} })
	}()
	var a [2]string
	select {
	case a = <-addrs:
	case err := <-done:
		t.Fatalf("serve ended early: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not become ready")
	}

	conn, err := grpc.NewClient(a[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	st, err := kvgatev1.NewRouterClient(conn).Generate(rctx, &kvgatev1.GenerateRequest{
		InputIds: []uint32{1, 2, 3, 4}, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: proto32(3)}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil || m.GetComplete() == nil {
		t.Fatalf("Generate: %v, %v", m, err)
	}
	// The embedded engines serve a tokenizer with a ChatML template, so chat
	// works out of the box.
	cst, err := kvgatev1.NewRouterClient(conn).Chat(rctx, &kvgatev1.ChatRequest{
		Messages:       []*kvgatev1.ChatMessage{{Role: "user", Content: "What is a KV cache?"}},
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: proto32(5)}})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := cst.Recv()
	if err != nil || cm.GetComplete() == nil || cm.GetComplete().Usage.GetPromptTokens() == 0 {
		t.Fatalf("Chat: %v, %v", cm, err)
	}
	ws, err := kvgatev1.NewAdminClient(conn).ListWorkers(rctx, &kvgatev1.ListWorkersRequest{})
	if err != nil || len(ws.Workers) != 2 {
		t.Fatalf("ListWorkers: %v, %v; want the 2 embedded engines", ws, err)
	}

	// SIGHUP reloads (or ignores); it never stops the router.
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "serve to handle SIGHUP", func() bool {
		return slices.ContainsFunc(logs.Records(slog.LevelInfo), func(r slog.Record) bool { return strings.HasPrefix(r.Message, "SIGHUP: ") })
	})
	if _, err := kvgatev1.NewAdminClient(conn).ListWorkers(rctx, &kvgatev1.ListWorkersRequest{}); err != nil {
		t.Fatalf("after SIGHUP: %v", err)
	}

	resp, err := http.Get("http://" + a[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `kvgate_requests_total{code="OK",method="/kvgate.v1.Router/Generate"} 1`) {
		t.Errorf("/metrics lacks the Generate request count:\n%s", body)
	}
	// Every kvgate metric the router exports is documented in docs/metrics.md.
	documented := documentedMetrics(t)
	fams, err := metricsdoc.ParseExposition(string(body))
	if err != nil {
		t.Fatal(err)
	}
	for name := range fams {
		if strings.HasPrefix(name, "kvgate_") && !documented(name) {
			t.Errorf("docs/metrics.md lacks %s", name)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v after shutdown", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not shut down")
	}
}

func TestServeRejectsBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--policy", "fastest"}, "unknown policy"},
		{[]string{"--worker-protocol", "tensorrt"}, "unknown worker protocol"},
		{[]string{"--worker-urls", "ftp://a:1"}, "grpc://"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"--decode", "a:1"}, "--pd-disaggregation"},
		{[]string{"--pd-disaggregation", "--worker-urls", "a:1"}, "--decode"},
		{[]string{"--pd-disaggregation", "--prefill-policy", "fastest"}, "unknown policy"},
		{[]string{"stray"}, "unexpected arguments"},
		{[]string{"--worker-urls", "127.0.0.1:1", "--wait-for-workers", "--worker-startup-timeout", "300ms"}, "no worker reachable within --worker-startup-timeout"},
		{[]string{"--cb-success-threshold", "0"}, "circuit breaker"},
		{[]string{"--retry-backoff-multiplier", "0.5"}, "--retry-backoff-multiplier"},
		{[]string{"--max-concurrent-requests", "0"}, "--max-concurrent-requests"},
		{[]string{"--cache-threshold", "1.5"}, "--cache-threshold"},
		{[]string{"--max-tree-size", "0"}, "--max-tree-size 0: must be at least one page"},
		{[]string{"--prefix-hash-load-factor", "0.5"}, "--prefix-hash-load-factor"},
		{[]string{"--vllm-load-factor", "0.9"}, "--vllm-load-factor"},
		{[]string{"--assignment-mode", "dice"}, "--assignment-mode"},
		{[]string{"--tls-cert-file", "x.pem"}, "--tls-key-file"},
		{[]string{"--health-check-interval", "0"}, "--health-check-interval is 0s; it must be > 0"},
		{[]string{"--health-check-timeout", "-1s"}, "--health-check-timeout"},
		{[]string{"--load-poll-interval", "0"}, "--load-poll-interval"},
		{[]string{"--health-failure-threshold", "0"}, "--health-failure-threshold"},
		{[]string{"--health-check", "rpc"}, `unknown health check "rpc" (want auto, engine, model-info, grpc-health, none)`},
		{[]string{"--service-discovery"}, "--selector key=value"},
		{[]string{"--service-discovery", "--pd-disaggregation", "--prefill-selector", "role=prefill"}, "--decode-selector"},
		{[]string{"--service-discovery", "--selector", "app"}, "--selector: \"app\" is not key=value"},
		{[]string{"--service-discovery", "--selector", "app=x", "--service-discovery-port", "0"}, "--service-discovery-port is 0"},
		{[]string{"--selector", "app=x"}, "--selector needs --service-discovery"},
		{[]string{"--prefill-selector", "role=prefill"}, "--prefill-selector needs --service-discovery"},
		{[]string{"--fastest-please"}, "unknown flag --fastest-please; kvgate serve -h lists the flags"},
		{[]string{"--polcy", "round_robin"}, "unknown flag --polcy (did you mean --policy?); kvgate serve -h lists the flags"},
		{[]string{"--port", "x"}, "invalid value"},
		{[]string{"--embedded-reply", "parrot"}, `--embedded-reply "parrot": want echo or random`},
	}
	for _, tc := range tests {
		// A flag that has become valid would start a router that serves
		// until cancelled: the deadline makes that row fail, not hang.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := run(ctx, append([]string{"serve", "--port", "0", "--prometheus-port", "-1"}, tc.args...), io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serve %v: err = %v, want one mentioning %q", tc.args, err, tc.want)
		}
	}
}

func proto32(v uint32) *uint32 { return &v }

// TestEmbeddedPD runs SMG's PD example shape on the embedded default:
// prefill and decode simulated engines in-process.
func TestEmbeddedPD(t *testing.T) {
	cfg := defaults(t, "--pd-disaggregation", "--port", "0", "--prometheus-port", "-1", "--embedded-time-scale", "0",
		"--prefill-policy", "cache_aware", "--decode-policy", "power_of_two")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.DiscardHandler), func(l listening) { addrs <- l.grpc }) }()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("serve ended early: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not become ready")
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	st, err := kvgatev1.NewRouterClient(conn).Generate(rctx, &kvgatev1.GenerateRequest{
		Text: "Disaggregated hello", SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: proto32(4)}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil || m.GetComplete() == nil || m.GetComplete().PrefillWorker == "" || m.GetComplete().Worker == m.GetComplete().PrefillWorker {
		t.Fatalf("Generate: %v, %v; want a completion naming distinct prefill and decode workers", m, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

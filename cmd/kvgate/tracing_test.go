package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
)

// serveOnce runs kvgate serve with args on free ports, sends one Generate
// with a client traceparent, and stops it, which flushes its spans.
func serveOnce(t *testing.T, args ...string) {
	t.Helper()
	cfg := defaults(t, append([]string{"--port", "0", "--prometheus-port", "-1", "--embedded-time-scale", "0"}, args...)...)
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.DiscardHandler), func(l listening) { addrs <- l.grpc }) }()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("serve ended early: %v", err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rctx, rcancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "traceparent",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), 10*time.Second)
	defer rcancel()
	st, err := kvgatev1.NewRouterClient(conn).Generate(rctx, &kvgatev1.GenerateRequest{
		InputIds: []uint32{1, 2, 3, 4}, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: proto32(3)}})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); err != nil || m.GetComplete() == nil {
		t.Fatalf("Generate: %v, %v", m, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// kvgate serve --otlp-endpoint exports the request's spans, flushed at
// shutdown (no span is sent before: the batch's delay is seconds).
func TestServeExportsTracesToTheFlagsEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	recv := testutil.StartOTLPReceiver(t)
	serveOnce(t, "--otlp-endpoint", recv.Addr(), "--otlp-sampling-ratio", "1")
	var names []string
	for _, s := range recv.Spans() {
		if s.TraceID() == "4bf92f3577b34da6a3ce929d0e0e4736" {
			names = append(names, s.Name)
		}
	}
	want := map[string]bool{"kvgate.v1.Router/Generate": true, "kvgate.select": true, "kvgate.dispatch regular": true}
	for _, n := range names {
		delete(want, n)
	}
	if len(want) > 0 {
		t.Fatalf("spans in the client's trace %v; missing %v", names, want)
	}
}

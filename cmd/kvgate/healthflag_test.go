package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestHealthCheckFlag: `kvgate serve` in front of engines whose HealthCheck
// answers an empty message keeps serving by default (--health-check auto),
// and with --health-check engine refuses them as the issue saw it: the
// flag reaches the health monitor.
func TestHealthCheckFlag(t *testing.T) {
	tests := []struct {
		mode string
		want codes.Code
	}{
		{"auto", codes.OK},
		{"engine", codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			var urls []string
			var engines []*sim.Engine
			for range 2 {
				cfg := sim.DefaultConfig()
				cfg.TimeScale = 0
				cfg.Logger = slog.New(slog.DiscardHandler)
				cfg.Faults.RPC.HealthEmpty = true
				srv, err := sim.Start(cfg, "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(srv.Stop)
				urls, engines = append(urls, srv.Addr()), append(engines, srv.Engine())
			}
			l := startServe(t, "--worker-urls", strings.Join(urls, ","), "--health-check", tt.mode,
				"--health-check-interval", "5ms", "--health-failure-threshold", "1")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for _, e := range engines {
				if err := e.WaitCalls(ctx, "HealthCheck", 20); err != nil {
					t.Fatal(err)
				}
			}
			conn, err := grpc.NewClient(l.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			st, err := kvgatev1.NewRouterClient(conn).Generate(ctx, &kvgatev1.GenerateRequest{
				InputIds: []uint32{1, 2, 3, 4}, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: proto32(3)}})
			if err == nil {
				_, err = st.Recv()
			}
			if got := status.Code(err); got != tt.want {
				t.Fatalf("Generate after 20 rounds of health checks: %v; want %v", err, tt.want)
			}
			if tt.want == codes.Unavailable && !strings.Contains(err.Error(), "0 passing health checks") {
				t.Errorf("Generate: %v; want it to say no worker passes its health checks", err)
			}
		})
	}
}

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/workers/sim"
)

// SMG's documented DP-aware command line, `--dp-aware --worker-urls
// http://worker1:8000 http://worker2:8000`, with two simulated engines of two
// data-parallel ranks each in place of worker1 and worker2: four workers,
// named and labelled url@rank, serving requests.
func TestServeDPAwareSMGLine(t *testing.T) {
	cfg := defaults(t, "--dp-aware", "--worker-urls", "http://worker1:8000", "http://worker2:8000")
	if !cfg.dpAware || !slices.Equal([]string(cfg.workerURLs), []string{"http://worker1:8000", "http://worker2:8000"}) {
		t.Fatalf("SMG's line parsed as dp-aware %v, workers %v", cfg.dpAware, cfg.workerURLs)
	}

	var urls, want []string
	for i, protocol := range []string{sim.ProtocolSGLang, sim.ProtocolVLLM} {
		c := sim.DefaultConfig()
		c.Protocol, c.TimeScale, c.DPSize, c.Seed = protocol, 0, 2, int64(i)
		c.Logger = slog.New(slog.DiscardHandler)
		s, err := sim.Start(c, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		urls = append(urls, "http://"+s.Addr())
		for r := range 2 {
			want = append(want, fmt.Sprintf("grpc://%s@%d", s.Addr(), r))
		}
	}
	l := startServe(t, "--dp-aware", "--worker-urls", urls[0], urls[1], "--prometheus-port", "0")
	ctx := context.Background()
	conn, err := grpc.NewClient(l.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	ws, err := kvgatev1.NewAdminClient(conn).ListWorkers(rctx, &kvgatev1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range ws.GetWorkers() {
		got = append(got, w.GetAddress())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ListWorkers = %v, want %v", got, want)
	}
	served := map[string]bool{}
	for i := range 8 {
		st, err := kvgatev1.NewRouterClient(conn).Generate(rctx, &kvgatev1.GenerateRequest{
			InputIds: []uint32{uint32(10 + 100*i), 2, 3, 4}, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: proto32(2)}})
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.Recv()
		if err != nil || m.GetComplete() == nil {
			t.Fatalf("Generate: %v, %v", m, err)
		}
		served[m.GetComplete().GetWorker()] = true
	}
	for w := range served {
		if !slices.Contains(want, w) {
			t.Errorf("served by %s, not a rank target", w)
		}
	}

	resp, err := http.Get("http://" + l.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `worker="`+want[3]+`"`) {
		t.Errorf("/metrics has no series labelled worker=%q", want[3])
	}
}

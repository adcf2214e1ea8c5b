package main

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/workers/sim"
)

// SMG's documented IGW command line, `--enable-igw --worker-urls
// http://worker1:8000 http://worker2:8000`, with two simulated engines
// serving two models in place of worker1 and worker2: each model's requests
// reach its own engine, Chat renders with its engine's tokenizer, and a model
// no engine serves is NOT_FOUND.
func TestServeIGWSMGLine(t *testing.T) {
	cfg := defaults(t, "--enable-igw", "--worker-urls", "http://worker1:8000", "http://worker2:8000")
	if !cfg.igw || !slices.Equal([]string(cfg.workerURLs), []string{"http://worker1:8000", "http://worker2:8000"}) {
		t.Fatalf("SMG's line parsed as igw %v, workers %v", cfg.igw, cfg.workerURLs)
	}
	var urls []string
	models := []string{"alpha", "beta"}
	for i, m := range models {
		c := sim.DefaultConfig()
		c.TimeScale, c.Model, c.Seed, c.Logger = 0, m, int64(i), slog.New(slog.DiscardHandler)
		s, err := sim.Start(c, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		urls = append(urls, "http://"+s.Addr())
	}
	l := startServe(t, "--enable-igw", "--worker-urls", urls[0], urls[1])
	ctx := context.Background()
	conn, err := grpc.NewClient(l.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	router := kvgatev1.NewRouterClient(conn)
	for i, m := range models {
		want := "grpc://" + urls[i][len("http://"):]
		for range 3 {
			st, err := router.Chat(rctx, &kvgatev1.ChatRequest{Model: m, Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "hi"}},
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: proto32(2)}})
			if err != nil {
				t.Fatal(err)
			}
			var done *kvgatev1.GenerateComplete
			for done == nil {
				msg, err := st.Recv()
				if err != nil {
					t.Fatalf("Chat %s: %v", m, err)
				}
				done = msg.GetComplete()
			}
			if done.GetWorker() != want {
				t.Fatalf("Chat %s served by %s, want %s", m, done.GetWorker(), want)
			}
		}
	}
	st, err := router.Generate(rctx, &kvgatev1.GenerateRequest{Model: "gamma", InputIds: []uint32{1, 2}})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.NotFound {
		t.Fatalf("Generate gamma: %v, want NOT_FOUND", err)
	}
	list, err := kvgatev1.NewAdminClient(conn).ListModels(rctx, &kvgatev1.ListModelsRequest{})
	if err != nil || len(list.GetModels()) != 2 {
		t.Fatalf("ListModels: %v, %v", list, err)
	}
}

package router_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// freeAddr is a loopback address nothing listens on yet: an engine that
// has not started.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// TestLateEngineServesItsTokenizer is deploy/kubernetes/sidecar.yaml: the
// router starts before its engine (which loads a model), is given no
// tokenizer path, and gives up waiting after --tokenizer-fetch-timeout.
// When the engine comes up and joins, its tokenizer must be fetched and
// Chat served, in every mode, without restarting the router.
func TestLateEngineServesItsTokenizer(t *testing.T) {
	tests := []struct {
		name string
		set  func(c *router.Config, prefill, decode string)
		sims func(prefill, decode string) []sim.Config
	}{
		{"one model", func(c *router.Config, p, _ string) { c.WorkerURLs = []string{"grpc://" + p} }, nil},
		{"prefill/decode disaggregation", func(c *router.Config, p, d string) {
			c.PD, c.WorkerURLs, c.DecodeURLs = true, []string{"grpc://" + p}, []string{"grpc://" + d}
		}, nil},
		{"--enable-igw", func(c *router.Config, p, _ string) { c.IGW, c.WorkerURLs = true, []string{"grpc://" + p} }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefill, decode := freeAddr(t), freeAddr(t)
			cfg := router.DefaultConfig()
			cfg.Policy = "round_robin"
			cfg.FetchTimeout = 50 * time.Millisecond
			cfg.Health.Interval = time.Hour
			cfg.Logger = slog.New(slog.DiscardHandler)
			tt.set(&cfg, prefill, decode)
			g, err := router.New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(g.Close)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go g.Serve(lis)
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			rc := kvgatev1.NewRouterClient(conn)

			// The engines come up after the router gave up waiting.
			if cfg.PD {
				simWith(t, prefill, func(c *sim.Config) { c.Role = sim.RolePrefill })
				simWith(t, decode, func(c *sim.Config) { c.Role, c.BootstrapTimeout = sim.RoleDecode, 5*time.Second })
			} else {
				simWith(t, prefill, nil)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			select {
			case <-router.TextJoined(g):
			case <-ctx.Done():
				t.Fatal("the engine joined, but its tokenizer was never fetched")
			}
			waitAllConnected(ctx, t, g.Registry)
			st, err := rc.Chat(ctx, &kvgatev1.ChatRequest{
				Messages:       []*kvgatev1.ChatMessage{{Role: "user", Content: "What is a KV cache?"}},
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: ptr(uint32(4))},
			})
			if err != nil {
				t.Fatal(err)
			}
			var done *kvgatev1.GenerateComplete
			for {
				m, err := st.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("Chat after the engine joined: %v", err)
				}
				if c := m.GetComplete(); c != nil {
					done = c
				}
			}
			if done == nil || done.GetUsage().GetPromptTokens() == 0 {
				t.Fatalf("Chat ended without a completion with a prompt: %v", done)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// waitAllConnected returns once every registered worker is connected.
func waitAllConnected(ctx context.Context, t *testing.T, reg *workers.Registry) {
	t.Helper()
	changed := make(chan struct{}, 1)
	defer reg.Watch(func(workers.Change) {
		select {
		case changed <- struct{}{}:
		default:
		}
	})()
	for {
		if !slices.ContainsFunc(reg.Snapshot(), func(w *workers.Worker) bool { return !w.Connected() }) {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("the engines never all joined")
		}
	}
}

// A model whose engines serve no tokenizer at start-up gets one from the
// first engine of the model that joins later and serves one, in every mode:
// both modes load tokenizers from the same model table (with --enable-igw
// such a model used to keep routing token ids only).
func TestModelGetsATokenizerFromAWorkerThatJoinsLater(t *testing.T) {
	for _, igw := range []bool{false, true} {
		t.Run(map[bool]string{false: "one model", true: "--enable-igw"}[igw], func(t *testing.T) {
			mute := simWith(t, "127.0.0.1:0", func(c *sim.Config) { c.Model, c.TokenizerDir, c.VocabSize = "alpha", "none", 2059 }) // the built-in tokenizer's
			cfg := router.DefaultConfig()
			cfg.Policy, cfg.IGW = "round_robin", igw
			cfg.WorkerURLs = []string{"grpc://" + mute.Addr()}
			cfg.Health.Interval = time.Hour
			cfg.Logger = slog.New(slog.DiscardHandler)
			g, err := router.New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(g.Close)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go g.Serve(lis)
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			rc := kvgatev1.NewRouterClient(conn)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			chat := func() error {
				st, err := rc.Chat(ctx, &kvgatev1.ChatRequest{Model: "alpha",
					Messages:       []*kvgatev1.ChatMessage{{Role: "user", Content: "What is a KV cache?"}},
					SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: ptr(uint32(2))}})
				if err != nil {
					return err
				}
				for {
					if _, err := st.Recv(); err == io.EOF {
						return nil
					} else if err != nil {
						return err
					}
				}
			}
			if err := chat(); status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("Chat before a worker serves a tokenizer: %v, want FAILED_PRECONDITION", err)
			}
			speaker := simWith(t, "127.0.0.1:0", func(c *sim.Config) { c.Model = "alpha" })
			if _, err := g.AddWorker(ctx, "grpc://"+speaker.Addr(), workers.RoleRegular, workers.ProtocolUnknown, 0); err != nil {
				t.Fatal(err)
			}
			select {
			case <-router.TextJoined(g):
			case <-ctx.Done():
				t.Fatal("a worker of the model that serves a tokenizer joined, but it was never fetched")
			}
			if err := chat(); err != nil {
				t.Fatalf("Chat once the tokenizer was fetched: %v", err)
			}
		})
	}
}

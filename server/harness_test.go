package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/server"
	"github.com/kvgate/kvgate/tokenize/cache"
	"github.com/kvgate/kvgate/tokenize/textmodel"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// fleet is a router in front of simulated engines, all over loopback gRPC.
type fleet struct {
	text   *textmodel.Model
	sims   []*sim.Server
	reg    *workers.Registry
	srv    *server.Server
	conn   *grpc.ClientConn
	router kvgatev1.RouterClient
	admin  kvgatev1.AdminClient
}

type fleetOptions struct {
	protocol string // sglang (default) or vllm
	workers  int    // default 2
	policy   string // default round_robin
	// options for the policy; zero fields take the policy's defaults.
	options policy.Options
	sim     func(i int, c *sim.Config)
	// beforeServe may register extra services on the router.
	beforeServe func(*server.Server)
	// text fetches the tokenizer from worker 0 (GetTokenizer), as kvgate
	// serve does when given no model path; chatTemplate overrides its template.
	text         bool
	chatTemplate string
}

// startFleet starts the engines and the router, and stops them when the test ends.
func startFleet(t testing.TB, o fleetOptions) *fleet {
	t.Helper()
	if o.protocol == "" {
		o.protocol = "sglang"
	}
	if o.workers == 0 {
		o.workers = 2
	}
	if o.policy == "" {
		o.policy = "round_robin"
	}
	ctx := context.Background()
	f := &fleet{reg: workers.NewRegistry()}
	t.Cleanup(func() { f.reg.Close() })
	for i := range o.workers {
		c := sim.DefaultConfig()
		c.Protocol = o.protocol
		c.TimeScale = 0
		c.Seed = int64(i)
		if o.sim != nil {
			o.sim(i, &c)
		}
		s, err := sim.Start(c, "127.0.0.1:0")
		if err != nil {
			t.Fatalf("start sim %d: %v", i, err)
		}
		t.Cleanup(s.Stop)
		f.sims = append(f.sims, s)
		w, err := workers.Connect(ctx, s.Addr(), workers.ConnectOptions{})
		if err != nil {
			t.Fatalf("connect to sim %d: %v", i, err)
		}
		if err := f.reg.Add(w); err != nil {
			t.Fatal(err)
		}
	}
	pol, err := policy.New(o.policy, o.options)
	if err != nil {
		t.Fatal(err)
	}
	if o.text {
		w := f.reg.Snapshot()[0]
		archive, err := w.Backend().Tokenizer(ctx)
		if err != nil {
			t.Fatalf("GetTokenizer from %s: %v", w.URL(), err)
		}
		if f.text, err = textmodel.FromArchive(archive, o.chatTemplate, textmodel.Options{Cache: cache.DefaultConfig()}); err != nil {
			t.Fatal(err)
		}
	}
	f.srv, err = server.New(server.Config{Registry: f.reg, Policy: pol, Logger: slog.New(slog.DiscardHandler), Text: f.text})
	if err != nil {
		t.Fatal(err)
	}
	if o.beforeServe != nil {
		o.beforeServe(f.srv)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go f.srv.Serve(lis)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		f.srv.Stop(ctx)
	})
	f.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.conn.Close() })
	f.router = kvgatev1.NewRouterClient(f.conn)
	f.admin = kvgatev1.NewAdminClient(f.conn)
	return f
}

// workerURL is the router's name for sim i.
func (f *fleet) workerURL(i int) string { return "grpc://" + f.sims[i].Addr() }

// chat runs one Chat call to its end, as generate does.
func (f *fleet) chat(ctx context.Context, t testing.TB, req *kvgatev1.ChatRequest) (result, error) {
	t.Helper()
	var r result
	st, err := f.router.Chat(ctx, req)
	if err != nil {
		return r, err
	}
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return r, nil
		}
		if err != nil {
			return r, err
		}
		r.ids = append(r.ids, m.GetRequestId())
		if c := m.GetChunk(); c != nil {
			r.chunks = append(r.chunks, c)
		}
		if c := m.GetComplete(); c != nil {
			r.complete = c
		}
	}
}

// result is everything a Generate call returned.
type result struct {
	chunks   []*kvgatev1.GenerateChunk
	complete *kvgatev1.GenerateComplete
	ids      []string // request ids on every message
}

// generate runs one Generate call to its end.
func (f *fleet) generate(ctx context.Context, t testing.TB, req *kvgatev1.GenerateRequest) (result, error) {
	t.Helper()
	var r result
	st, err := f.router.Generate(ctx, req)
	if err != nil {
		return r, err
	}
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return r, nil
		}
		if err != nil {
			return r, err
		}
		r.ids = append(r.ids, m.GetRequestId())
		switch x := m.Response.(type) {
		case *kvgatev1.GenerateResponse_Chunk:
			if r.complete != nil {
				t.Fatal("chunk after completion")
			}
			r.chunks = append(r.chunks, x.Chunk)
		case *kvgatev1.GenerateResponse_Complete:
			if r.complete != nil {
				t.Fatal("two completions")
			}
			r.complete = x.Complete
		}
	}
}

// mustGenerate is generate for calls that must succeed with a completion.
func (f *fleet) mustGenerate(t testing.TB, req *kvgatev1.GenerateRequest) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := f.generate(ctx, t, req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if r.complete == nil {
		t.Fatal("Generate ended without a completion")
	}
	return r
}

// prompt returns n token ids starting at first.
func prompt(first uint32, n int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = first + uint32(i)
	}
	return ids
}

func u32(v uint32) *uint32   { return &v }
func f32(v float32) *float32 { return &v }
func i32(v int32) *int32     { return &v }

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

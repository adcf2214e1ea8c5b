package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/server"
	"github.com/kvgate/kvgate/tokenize/cache"
	"github.com/kvgate/kvgate/tokenize/textmodel"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// fleet is a router in front of simulated engines, all over loopback gRPC,
// built by router.New exactly as `kvgate serve` builds it.
type fleet struct {
	text   *textmodel.Model
	sims   []*sim.Process
	g      *router.Router
	reg    *workers.Registry
	srv    *server.Server
	conn   *grpc.ClientConn
	router kvgatev1.RouterClient
	admin  kvgatev1.AdminClient
}

type fleetOptions struct {
	protocol string // sglang (default), vllm or trtllm
	workers  int    // default 2
	policy   string // default round_robin
	// options adjusts the policy options, which start at their defaults.
	options func(*policy.Options)
	sim     func(i int, c *sim.Config)
	// pd starts workers/2 prefill engines and workers/2 decode engines
	// (prefill first) behind a disaggregating router.
	pd bool
	// config adjusts the router's configuration last.
	config func(*router.Config)
	// healthInterval runs health checks that often, needing 1 result to
	// flip a worker; 0: only the check at start.
	healthInterval time.Duration
	// beforeServe may register extra services on the router.
	beforeServe func(*server.Server)
	// text fetches the tokenizer from the workers (GetTokenizer), as kvgate
	// serve does when given no model path; chatTemplate overrides its
	// template. Without it the router has no tokenizer.
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
	discard := slog.New(slog.DiscardHandler)
	cfg := router.DefaultConfig()
	cfg.Policy = o.policy
	if o.options != nil {
		o.options(&cfg.Options)
	}
	cfg.Logger = discard
	cfg.LoadPollInterval = 50 * time.Millisecond
	cfg.Health = workers.HealthConfig{Interval: time.Hour, Timeout: time.Second, FailureThreshold: 1, SuccessThreshold: 1}
	if o.healthInterval > 0 {
		cfg.Health.Interval = o.healthInterval
	}
	cfg.TokenIDsOnly = !o.text
	cfg.TextSources.ChatTemplatePath = o.chatTemplate
	cfg.TextOptions = textmodel.Options{Cache: cache.DefaultConfig()}
	cfg.PD = o.pd
	f := &fleet{}
	for i := range o.workers {
		c := sim.DefaultConfig()
		c.Protocol = o.protocol
		c.TimeScale = 0
		c.Seed = int64(i)
		c.Logger = discard
		prefill := o.pd && i < o.workers/2
		if o.pd {
			c.Role, c.BootstrapTimeout = sim.RoleDecode, 300*time.Millisecond
			if prefill {
				c.Role = sim.RolePrefill
			}
		}
		if o.sim != nil {
			o.sim(i, &c)
		}
		s, err := sim.Start(c, "127.0.0.1:0")
		if err != nil {
			t.Fatalf("start sim %d: %v", i, err)
		}
		t.Cleanup(s.Stop)
		f.sims = append(f.sims, s)
		if o.pd && !prefill {
			cfg.DecodeURLs = append(cfg.DecodeURLs, "grpc://"+s.Addr())
		} else {
			cfg.WorkerURLs = append(cfg.WorkerURLs, "grpc://"+s.Addr())
		}
	}
	if o.config != nil {
		o.config(&cfg)
	}
	g, err := router.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.g, f.reg, f.srv, f.text = g, g.Registry, g.Server, g.Text
	if o.beforeServe != nil {
		o.beforeServe(f.srv)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		g.Shutdown(ctx)
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

// errMalformed marks a stream that broke the protocol: a message after the
// completion.
var errMalformed = errors.New("malformed stream")

// generate runs one Generate call to its end; a malformed stream fails the
// test.
func (f *fleet) generate(ctx context.Context, t testing.TB, req *kvgatev1.GenerateRequest) (result, error) {
	t.Helper()
	r, err := f.readGenerate(ctx, req)
	if errors.Is(err, errMalformed) {
		t.Fatal(err)
	}
	return r, err
}

// readGenerate runs one Generate call to its end and reports a malformed
// stream as an error wrapping errMalformed, so that client goroutines need
// not fail the test themselves.
func (f *fleet) readGenerate(ctx context.Context, req *kvgatev1.GenerateRequest) (result, error) {
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
		if r.complete != nil {
			return r, fmt.Errorf("%w: a message after the completion", errMalformed)
		}
		switch x := m.Response.(type) {
		case *kvgatev1.GenerateResponse_Chunk:
			r.chunks = append(r.chunks, x.Chunk)
		case *kvgatev1.GenerateResponse_Complete:
			r.complete = x.Complete
		}
	}
}

// streaming opens a streamed Generate of req and returns it once its first
// message has arrived: a request then running on an engine, as the tests
// that stall, kill or hold one need it. A failure to open or read fails
// the test.
func (f *fleet) streaming(ctx context.Context, t testing.TB, req *kvgatev1.GenerateRequest) grpc.ServerStreamingClient[kvgatev1.GenerateResponse] {
	t.Helper()
	req.Stream = true
	st, err := f.router.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	return st
}

// generateAll runs n Generate calls at once, the i-th sending req(i), and
// returns the results of those that succeeded; each failure fails the test.
func (f *fleet) generateAll(ctx context.Context, t testing.TB, n int, req func(i int) *kvgatev1.GenerateRequest) []result {
	t.Helper()
	var wg sync.WaitGroup
	results := make(chan result, n)
	for i := range n {
		wg.Go(func() {
			r, err := f.readGenerate(ctx, req(i))
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			results <- r
		})
	}
	wg.Wait()
	close(results)
	out := make([]result, 0, n)
	for r := range results {
		out = append(out, r)
	}
	return out
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

package sim

import (
	"context"
	"flag"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/api/gen/vllm"
)

// rawCalls are one protocol's calls whose answers the RPC faults change,
// returning the message as the wire carried it.
type rawCalls struct {
	health    func(ctx context.Context) (proto.Message, error)
	embed     func(ctx context.Context) (proto.Message, error)
	loads     func(ctx context.Context) error
	tokenizer func(ctx context.Context) error
}

func rawClient(conn *grpc.ClientConn, protocol string) rawCalls {
	tokenizer := func(st interface {
		Recv() (*smgcommon.GetTokenizerChunk, error)
	}, err error) error {
		if err != nil {
			return err
		}
		for {
			if _, err := st.Recv(); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
		}
	}
	if protocol == ProtocolSGLang {
		c := sglang.NewSglangSchedulerClient(conn)
		return rawCalls{
			health: func(ctx context.Context) (proto.Message, error) {
				return c.HealthCheck(ctx, &sglang.HealthCheckRequest{})
			},
			embed: func(ctx context.Context) (proto.Message, error) {
				return c.Embed(ctx, &sglang.EmbedRequest{Tokenized: &sglang.TokenizedInput{InputIds: []uint32{1, 2, 3}}})
			},
			loads: func(ctx context.Context) error { _, err := c.GetLoads(ctx, &sglang.GetLoadsRequest{}); return err },
			tokenizer: func(ctx context.Context) error {
				return tokenizer(c.GetTokenizer(ctx, &smgcommon.GetTokenizerRequest{}))
			},
		}
	}
	c := vllm.NewVllmEngineClient(conn)
	return rawCalls{
		health: func(ctx context.Context) (proto.Message, error) {
			return c.HealthCheck(ctx, &vllm.HealthCheckRequest{})
		},
		embed: func(ctx context.Context) (proto.Message, error) {
			return c.Embed(ctx, &vllm.EmbedRequest{Tokenized: &vllm.TokenizedInput{InputIds: []uint32{1, 2, 3}}})
		},
		loads: func(ctx context.Context) error { _, err := c.GetLoads(ctx, &vllm.GetLoadsRequest{}); return err },
		tokenizer: func(ctx context.Context) error {
			return tokenizer(c.GetTokenizer(ctx, &smgcommon.GetTokenizerRequest{}))
		},
	}
}

// TestRPCFaults: each partial-implementation switch changes exactly the
// answer it names, on both protocols, and the engine counts every call.
func TestRPCFaults(t *testing.T) {
	tests := []struct {
		name   string
		faults RPCFaults
		// check asserts what the calls answer now.
		check func(t *testing.T, ctx context.Context, c rawCalls)
	}{
		{"no fault: every call answers in full", RPCFaults{}, func(t *testing.T, ctx context.Context, c rawCalls) {
			if m, err := c.health(ctx); err != nil || proto.Size(m) == 0 {
				t.Errorf("HealthCheck = %v, %v; want a healthy answer", m, err)
			}
			if m, err := c.embed(ctx); err != nil || proto.Size(m) == 0 {
				t.Errorf("Embed = %v, %v; want a vector", m, err)
			}
			if err := c.loads(ctx); err != nil {
				t.Errorf("GetLoads: %v", err)
			}
		}},
		{"health-empty: HealthCheck answers an empty message", RPCFaults{HealthEmpty: true}, func(t *testing.T, ctx context.Context, c rawCalls) {
			if m, err := c.health(ctx); err != nil || proto.Size(m) != 0 {
				t.Errorf("HealthCheck = %v, %v; want an empty message", m, err)
			}
			if m, err := c.embed(ctx); err != nil || proto.Size(m) == 0 {
				t.Errorf("Embed = %v, %v; want a vector", m, err)
			}
		}},
		{"embed-empty: Embed answers an empty message", RPCFaults{EmbedEmpty: true}, func(t *testing.T, ctx context.Context, c rawCalls) {
			if m, err := c.embed(ctx); err != nil || proto.Size(m) != 0 {
				t.Errorf("Embed = %v, %v; want an empty message", m, err)
			}
			if m, err := c.health(ctx); err != nil || proto.Size(m) == 0 {
				t.Errorf("HealthCheck = %v, %v; want a healthy answer", m, err)
			}
		}},
		{"unimplemented: the listed RPCs answer UNIMPLEMENTED", RPCFaults{Unimplemented: "GetLoads,GetTokenizer,HealthCheck"}, func(t *testing.T, ctx context.Context, c rawCalls) {
			_, herr := c.health(ctx)
			for name, err := range map[string]error{"HealthCheck": herr, "GetLoads": c.loads(ctx), "GetTokenizer": c.tokenizer(ctx)} {
				if status.Code(err) != codes.Unimplemented {
					t.Errorf("%s: %v; want UNIMPLEMENTED", name, err)
				}
			}
			if m, err := c.embed(ctx); err != nil || proto.Size(m) == 0 {
				t.Errorf("Embed = %v, %v; want a vector", m, err)
			}
		}},
		{"delayed: the listed RPCs answer late, or when the caller gives up", RPCFaults{Delayed: "GetLoads", Delay: time.Hour}, func(t *testing.T, ctx context.Context, c rawCalls) {
			lctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			if err := c.loads(lctx); status.Code(err) != codes.DeadlineExceeded {
				t.Errorf("GetLoads with a 100ms deadline: %v; want DEADLINE_EXCEEDED, the answer being an hour late", err)
			}
			if m, err := c.health(ctx); err != nil || proto.Size(m) == 0 {
				t.Errorf("HealthCheck = %v, %v; want a healthy answer at once", m, err)
			}
		}},
	}
	for _, tt := range tests {
		for _, p := range protocols {
			t.Run(tt.name+"/"+p, func(t *testing.T) {
				cfg := testConfig(p)
				cfg.TokenizerDir = "" // the built-in tokenizer, for GetTokenizer
				cfg.VocabSize = 0
				cfg.Faults.RPC = tt.faults
				srv, _ := startSim(t, cfg)
				conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				ctx := t.Context()
				tt.check(t, ctx, rawClient(conn, p))
				if got := srv.Engine().Calls("HealthCheck"); got != 1 {
					t.Errorf("Calls(HealthCheck) = %d; want 1", got)
				}
			})
		}
	}
}

// TestStandardHealth: with GRPCHealth on, grpc.health.v1 says SERVING for
// the server and the engine's service, NOT_SERVING under the Unhealthy
// fault, and NOT_FOUND for another service; off, it is UNIMPLEMENTED.
func TestStandardHealth(t *testing.T) {
	forEachProtocol(t, func(c *Config) { c.GRPCHealth = true }, func(t *testing.T, srv *Process, _ client) {
		conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		h := healthpb.NewHealthClient(conn)
		service := sglang.SglangScheduler_ServiceDesc.ServiceName
		if srv.Engine().Config().Protocol == ProtocolVLLM {
			service = vllm.VllmEngine_ServiceDesc.ServiceName
		}
		for _, name := range []string{"", service} {
			if r, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{Service: name}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("Check(%q) = %v, %v; want SERVING", name, r, err)
			}
		}
		if _, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "other"}); status.Code(err) != codes.NotFound {
			t.Errorf("Check(other): %v; want NOT_FOUND", err)
		}
		srv.Engine().SetFaults(Faults{Unhealthy: true})
		if r, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("Check under Unhealthy = %v, %v; want NOT_SERVING", r, err)
		}
		if got := srv.Engine().Calls("Check"); got != 4 {
			t.Errorf("Calls(Check) = %d; want 4", got)
		}
	})
	forEachProtocol(t, nil, func(t *testing.T, srv *Process, _ client) {
		conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unimplemented {
			t.Errorf("Check without GRPCHealth: %v; want UNIMPLEMENTED", err)
		}
	})
}

// TestUnimplementedFlag: --unimplemented takes the protocols' method names,
// comma- or space-separated, and refuses any other.
func TestUnimplementedFlag(t *testing.T) {
	tests := []struct {
		arg     string
		want    RPCNames
		wantErr bool
	}{
		{"GetLoads", "GetLoads", false},
		{"GetLoads,GetTokenizer SubscribeKvEvents", "GetLoads,GetTokenizer,SubscribeKvEvents", false},
		{"Embed,HealthCheck,Generate", "Embed,HealthCheck,Generate", false},
		{"GetLoad", "", true},
	}
	for _, tt := range tests {
		cfg := DefaultConfig()
		fs := flag.NewFlagSet("sim", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.RegisterFlags(fs)
		err := fs.Parse([]string{"--unimplemented", tt.arg})
		if (err != nil) != tt.wantErr || cfg.Faults.RPC.Unimplemented != tt.want {
			t.Errorf("--unimplemented %q: %q, %v; want %q (error %v)", tt.arg, cfg.Faults.RPC.Unimplemented, err, tt.want, tt.wantErr)
		}
	}
	if !RPCNames("GetLoads,Embed").Has("Embed") || RPCNames("GetLoads").Has("Get") {
		t.Error("Has matches names, not parts of them")
	}
}

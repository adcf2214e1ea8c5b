package auth

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

const (
	routerKey = "router-key-0123456789"
	adminKey  = "admin-key-9876543210"
)

// The real kvgate services with every method unimplemented: a call that
// passes authentication ends in codes.Unimplemented, one that does not in
// codes.Unauthenticated, so the two outcomes cannot be confused.
type routerServer struct {
	kvgatev1.UnimplementedRouterServer
}
type adminServer struct {
	kvgatev1.UnimplementedAdminServer
}

// serve starts a real gRPC server on loopback with the health, reflection,
// Router and Admin services behind the tap of New(cfg), and returns
// a plaintext client connection to it.
func serve(t *testing.T, cfg Config, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	a := New(cfg)
	srv := grpc.NewServer(grpc.InTapHandle(a.Tap(nil)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	reflection.Register(srv)
	kvgatev1.RegisterRouterServer(srv, routerServer{})
	kvgatev1.RegisterAdminServer(srv, adminServer{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	cc, err := grpc.NewClient(lis.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// calls returns one function per kind of call, each returning the call's
// final error.
func calls() map[string]func(context.Context, *grpc.ClientConn) error {
	return map[string]func(context.Context, *grpc.ClientConn) error{
		"health": func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		},
		"reflection v1": func(ctx context.Context, cc *grpc.ClientConn) error {
			st, err := reflectionv1.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
			if err != nil {
				return err
			}
			req := &reflectionv1.ServerReflectionRequest{
				MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{ListServices: "*"},
			}
			if err := st.Send(req); err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
		"reflection v1alpha": func(ctx context.Context, cc *grpc.ClientConn) error {
			st, err := reflectionv1alpha.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
			if err != nil {
				return err
			}
			req := &reflectionv1alpha.ServerReflectionRequest{
				MessageRequest: &reflectionv1alpha.ServerReflectionRequest_ListServices{ListServices: "*"},
			}
			if err := st.Send(req); err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
		// Admin/ListWorkers is unary.
		"admin": func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := kvgatev1.NewAdminClient(cc).ListWorkers(ctx, &kvgatev1.ListWorkersRequest{})
			return err
		},
		// Router/Generate is server-streaming.
		"router": func(ctx context.Context, cc *grpc.ClientConn) error {
			st, err := kvgatev1.NewRouterClient(cc).Generate(ctx, &kvgatev1.GenerateRequest{})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
	}
}

func TestTapOverGRPC(t *testing.T) {
	open := Config{}
	routerOnly := Config{APIKey: routerKey}
	both := Config{APIKey: routerKey, AdminAPIKey: adminKey}
	adminOnly := Config{AdminAPIKey: adminKey}
	const (
		ok     = codes.OK
		passed = codes.Unimplemented // authenticated, reached the handler
		denied = codes.Unauthenticated
	)
	tests := []struct {
		name string
		cfg  Config
		call string
		auth string // the authorization metadata; empty sends none
		want codes.Code
	}{
		{"no keys: router open", open, "router", "", passed},
		{"no keys: admin open", open, "admin", "", passed},
		{"no keys: any bearer ignored", open, "admin", "Bearer whatever", passed},

		{"router: no key", routerOnly, "router", "", denied},
		{"router: wrong key", routerOnly, "router", "Bearer wrong", denied},
		{"router: right key", routerOnly, "router", "Bearer " + routerKey, passed},
		{"router: scheme lower case", routerOnly, "router", "bearer " + routerKey, passed},
		{"router: scheme upper case", routerOnly, "router", "BEARER " + routerKey, passed},
		{"router: other scheme", routerOnly, "router", "Basic " + routerKey, denied},
		{"router: bare key", routerOnly, "router", routerKey, denied},
		{"router: key with suffix", routerOnly, "router", "Bearer " + routerKey + "x", denied},
		{"router: admin key", both, "router", "Bearer " + adminKey, denied},

		{"admin without admin key: no key", routerOnly, "admin", "", denied},
		{"admin without admin key: router key opens it", routerOnly, "admin", "Bearer " + routerKey, passed},
		{"admin without admin key: wrong key", routerOnly, "admin", "Bearer wrong", denied},
		{"admin with admin key: router key refused", both, "admin", "Bearer " + routerKey, denied},
		{"admin with admin key: admin key", both, "admin", "Bearer " + adminKey, passed},
		{"admin with admin key: no key", both, "admin", "", denied},
		{"admin key only: router open", adminOnly, "router", "", passed},
		{"admin key only: admin closed", adminOnly, "admin", "", denied},

		{"health open without key", both, "health", "", ok},
		{"health open with wrong key", both, "health", "Bearer wrong", ok},
		{"reflection v1 open", both, "reflection v1", "", ok},
		{"reflection v1alpha open", both, "reflection v1alpha", "", ok},
	}
	conns := map[Config]*grpc.ClientConn{} // one server per configuration
	for _, tt := range tests {
		cc, found := conns[tt.cfg]
		if !found {
			cc = serve(t, tt.cfg)
			conns[tt.cfg] = cc
		}
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			if tt.auth != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", tt.auth)
			}
			err := calls()[tt.call](ctx, cc)
			if got := status.Code(err); got != tt.want {
				t.Fatalf("%s with %q: code %v (%v), want %v", tt.call, tt.auth, got, err, tt.want)
			}
			if tt.want != codes.Unauthenticated {
				return
			}
			msg := status.Convert(err).Message()
			if _, presented, _ := strings.Cut(tt.auth, " "); presented != "" && strings.Contains(msg, presented) {
				t.Errorf("refusal %q repeats the presented key", msg)
			}
			if tt.auth == "" && !strings.Contains(msg, "authorization: Bearer <key>") {
				t.Errorf("refusal %q does not say what to send", msg)
			}
		})
	}
}

func TestRefusalMessages(t *testing.T) {
	a := New(Config{APIKey: routerKey, AdminAPIKey: adminKey})
	tests := []struct {
		name, method string
		auth         []string
		want         string
	}{
		{"missing", "/kvgate.v1.Router/Generate", nil,
			"missing authorization metadata: send 'authorization: Bearer <key>'"},
		{"wrong admin key", "/kvgate.v1.Admin/ListWorkers", []string{"Bearer " + routerKey},
			"invalid API key for kvgate.v1.Admin"},
		{"wrong router key", "/kvgate.v1.Router/Chat", []string{"Bearer nope"},
			"invalid API key for kvgate.v1.Router"},
		{"malformed", "/kvgate.v1.Router/Chat", []string{"Token " + routerKey},
			"malformed authorization metadata: send 'authorization: Bearer <key>'"},
		{"empty bearer", "/kvgate.v1.Router/Chat", []string{"Bearer "},
			"malformed authorization metadata: send 'authorization: Bearer <key>'"},
		// Two values would let one call try two guesses.
		{"two values", "/kvgate.v1.Router/Chat", []string{"Bearer nope", "Bearer " + routerKey},
			"more than one authorization metadata value: send 'authorization: Bearer <key>' once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := metadata.MD{}
			for _, v := range tt.auth {
				md.Append("authorization", v)
			}
			ctx := metadata.NewIncomingContext(t.Context(), md)
			st := status.Convert(a.Authorize(ctx, tt.method))
			if st.Code() != codes.Unauthenticated || st.Message() != tt.want {
				t.Errorf("Authorize = %v %q, want Unauthenticated %q", st.Code(), st.Message(), tt.want)
			}
		})
	}
}

// Services that the server tests cannot reach (grpc-go refuses unknown
// services before interceptors run) are checked through Authorize.
func TestAuthorizeOtherServices(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		method string
		auth   string
		wantOK bool
	}{
		{"unknown service closed by router key", Config{APIKey: routerKey}, "/kvgate.v2.Router/Generate", "", false},
		{"unknown service opened by router key", Config{APIKey: routerKey}, "/other.Svc/Do", "Bearer " + routerKey, true},
		{"unknown service not opened by admin key", Config{APIKey: routerKey, AdminAPIKey: adminKey}, "/other.Svc/Do", "Bearer " + adminKey, false},
		{"unknown service open without router key", Config{AdminAPIKey: adminKey}, "/other.Svc/Do", "", true},
		{"malformed method name closed", Config{APIKey: routerKey}, "grpc.health.v1.Health", "", false},
		{"health watch open", Config{APIKey: routerKey}, "/grpc.health.v1.Health/Watch", "", true},
		{"service name prefix is not health", Config{APIKey: routerKey}, "/grpc.health.v1.HealthX/Check", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			if tt.auth != "" {
				ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", tt.auth))
			}
			err := New(tt.cfg).Authorize(ctx, tt.method)
			if (err == nil) != tt.wantOK {
				t.Errorf("Authorize(%s) = %v, want ok=%v", tt.method, err, tt.wantOK)
			}
		})
	}
}

func TestBearerCredentials(t *testing.T) {
	cc := serve(t, Config{APIKey: routerKey}, grpc.WithPerRPCCredentials(Bearer(routerKey)))
	for _, call := range []string{"router", "admin"} {
		if err := calls()[call](t.Context(), cc); status.Code(err) != codes.Unimplemented {
			t.Errorf("%s with Bearer credentials: %v, want Unimplemented (authenticated)", call, err)
		}
	}
	creds := Bearer(routerKey)
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(verb, creds); strings.Contains(s, routerKey) {
			t.Errorf("Sprintf(%q) = %q shows the key", verb, s)
		}
	}
	if creds.RequireTransportSecurity() {
		t.Error("RequireTransportSecurity = true; plaintext loopback must work")
	}
}

func TestRefusalLogNeverShowsKey(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	const guess = "guessed-secret-42"
	cc := serve(t, Config{APIKey: routerKey, Logger: logger})
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+guess)
	if err := calls()["router"](ctx, cc); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("wrong key: %v, want Unauthenticated", err)
	}
	log := buf.String()
	if !strings.Contains(log, "/kvgate.v1.Router/Generate") {
		t.Errorf("log %q does not name the refused method", log)
	}
	if strings.Contains(log, guess) || strings.Contains(log, routerKey) {
		t.Errorf("log %q contains a key", log)
	}
}

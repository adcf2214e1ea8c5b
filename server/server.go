// Package server is kvgate's public face: the kvgate.v1 Router and Admin gRPC
// services, the standard health and reflection services, interceptors, and the
// request pipeline that validates a request, asks the policy for a worker,
// dispatches it and relays the worker's stream back to the client.
package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/tokenize/textmodel"
	"github.com/kvgate/kvgate/workers"
)

// Config wires a Server to its fleet.
type Config struct {
	Registry *workers.Registry
	Policy   policy.Policy
	// Metrics may be nil; the server then creates its own.
	Metrics *Metrics
	// Logger may be nil: slog.Default().
	Logger *slog.Logger
	// AbortTimeout bounds the Abort call sent to a worker when a client goes
	// away. Default 2 s.
	AbortTimeout time.Duration
	// Text is the model's tokenizer and chat template; nil: the router takes
	// token ids only, and text, chat and stop strings fail with
	// FAILED_PRECONDITION.
	Text *textmodel.Model
	// PD, when set, serves every request with prefill/decode disaggregation
	// over the registry's prefill and decode workers; Policy is then the
	// prefill policy (its tree and metrics are exported).
	PD *pd.Dispatcher
}

// Server is a configured kvgate gRPC server.
type Server struct {
	reg          *workers.Registry
	policy       policy.Policy
	metrics      *Metrics
	log          *slog.Logger
	abortTimeout time.Duration
	text         *textmodel.Model
	pd           *pd.Dispatcher
	// pdPrefillName labels PD decisions with the prefill policy.
	pdPrefillName string

	grpc   *grpc.Server
	health *health.Server
}

// routerService is the name the health service reports for generation: it is
// SERVING while at least one worker is healthy.
const routerService = "kvgate.v1.Router"

// New builds a server with its services and interceptors registered. Call
// Serve to start it.
func New(cfg Config) (*Server, error) {
	if cfg.Registry == nil || cfg.Policy == nil {
		return nil, fmt.Errorf("server: Registry and Policy are required")
	}
	s := &Server{
		reg:           cfg.Registry,
		policy:        cfg.Policy,
		metrics:       cfg.Metrics,
		log:           cfg.Logger,
		abortTimeout:  cfg.AbortTimeout,
		text:          cfg.Text,
		pd:            cfg.PD,
		pdPrefillName: cfg.Policy.Name(),
		health:        health.NewServer(),
	}
	if s.metrics == nil {
		s.metrics = NewMetrics(cfg.Registry)
	}
	if s.text != nil {
		if err := s.metrics.Registry.Register(tokenizerCollector{s.text}); err != nil {
			return nil, fmt.Errorf("server: tokenizer cache metrics: %w", err)
		}
	}
	if t, ok := s.policy.(treeStatser); ok {
		model := ""
		if ws := s.reg.Snapshot(); len(ws) > 0 {
			model = ws[0].Info().Model
		}
		if err := s.metrics.Registry.Register(treeCollector{model: model, tree: t}); err != nil {
			return nil, fmt.Errorf("server: tree metrics: %w", err)
		}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.abortTimeout <= 0 {
		s.abortTimeout = 2 * time.Second
	}

	logOpts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall)}
	recoverOpts := []recovery.Option{recovery.WithRecoveryHandlerContext(s.recoverPanic)}
	// Health probes and reflection would drown the request log.
	ours := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool { return monitored(c.FullMethod()) })
	s.grpc = grpc.NewServer(
		grpc.ChainUnaryInterceptor(
			selector.UnaryServerInterceptor(logging.UnaryServerInterceptor(slogAdapter(s.log), logOpts...), ours),
			s.metrics.UnaryInterceptor,
			recovery.UnaryServerInterceptor(recoverOpts...),
		),
		grpc.ChainStreamInterceptor(
			selector.StreamServerInterceptor(logging.StreamServerInterceptor(slogAdapter(s.log), logOpts...), ours),
			s.metrics.StreamInterceptor,
			recovery.StreamServerInterceptor(recoverOpts...),
		),
		grpc.ForceServerCodecV2(newRequestCodec()),
	)
	kvgatev1.RegisterRouterServer(s.grpc, &router{s: s})
	kvgatev1.RegisterAdminServer(s.grpc, &admin{s: s, reg: s.reg})
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.UpdateHealth()
	return s, nil
}

// GRPC exposes the underlying server, for registering more services before Serve.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Metrics returns the server's metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

// Serve accepts connections on lis until Stop.
func (s *Server) Serve(lis net.Listener) error { return s.grpc.Serve(lis) }

// Stop stops accepting requests and lets running ones finish until ctx ends,
// then closes whatever is left.
func (s *Server) Stop(ctx context.Context) {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
	}
}

// UpdateHealth sets the health service's status for kvgate.v1.Router from the
// workers' health: SERVING while any worker is healthy. The overall status ("")
// stays SERVING while the process runs, so liveness probes do not restart a
// router whose workers are down.
func (s *Server) UpdateHealth() {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	for _, w := range s.reg.Snapshot() {
		if w.Healthy() {
			st = healthpb.HealthCheckResponse_SERVING
			break
		}
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(routerService, st)
}

// recoverPanic turns a handler panic into INTERNAL for that one RPC and logs
// the stack; the process keeps serving everyone else.
func (s *Server) recoverPanic(ctx context.Context, p any) error {
	s.log.ErrorContext(ctx, "panic in handler", "panic", p, "stack", string(debug.Stack()))
	return status.Error(codes.Internal, "internal error")
}

// slogAdapter lets the go-grpc-middleware logging interceptors write to slog.
func slogAdapter(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}

// admin implements kvgate.v1.Admin.
type admin struct {
	kvgatev1.UnimplementedAdminServer
	s   *Server
	reg *workers.Registry
}

func (a *admin) ListWorkers(context.Context, *kvgatev1.ListWorkersRequest) (*kvgatev1.ListWorkersResponse, error) {
	resp := &kvgatev1.ListWorkersResponse{}
	for _, w := range a.reg.Snapshot() {
		el := w.EngineLoad()
		h := kvgatev1.Health_HEALTH_UNHEALTHY
		if w.Healthy() {
			h = kvgatev1.Health_HEALTH_HEALTHY
		}
		resp.Workers = append(resp.Workers, &kvgatev1.Worker{
			Address:       w.URL(),
			Protocol:      protocolPB(w.Protocol()),
			Role:          rolePB(w.Role()),
			Health:        h,
			InFlight:      uint32(w.InFlight()),
			Model:         w.Info().Model,
			EngineRunning: uint32(max(el.Running, 0)),
			EngineWaiting: uint32(max(el.Waiting, 0)),
			KvUsage:       el.TokenUsage,
		})
	}
	return resp, nil
}

func protocolPB(p workers.Protocol) kvgatev1.Protocol {
	switch p {
	case workers.ProtocolSGLang:
		return kvgatev1.Protocol_PROTOCOL_SGLANG
	case workers.ProtocolVLLM:
		return kvgatev1.Protocol_PROTOCOL_VLLM
	}
	return kvgatev1.Protocol_PROTOCOL_UNSPECIFIED
}

func rolePB(r workers.Role) kvgatev1.Role {
	switch r {
	case workers.RolePrefill:
		return kvgatev1.Role_ROLE_PREFILL
	case workers.RoleDecode:
		return kvgatev1.Role_ROLE_DECODE
	}
	return kvgatev1.Role_ROLE_REGULAR
}

// Package server is kvgate's public face: the kvgate.v1 Router and Admin gRPC
// services, the standard health and reflection services, the codec,
// interceptors, admission and rate limits, and the edge where errors become
// gRPC statuses. It validates a request, turns it into a pipeline.Job and
// hands it to the request pipeline (package pipeline), which places it,
// relays the worker's stream back to the client and retries.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/kvgate/kvgate/answer"
	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/auth"
	"github.com/kvgate/kvgate/internal/tracing"
	"github.com/kvgate/kvgate/modeltable"
	"github.com/kvgate/kvgate/pipeline"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/tokenize/cache"
	"github.com/kvgate/kvgate/workers"
)

// Config wires a Server to its fleet.
type Config struct {
	Registry *workers.Registry
	// Models says how workers are told apart by model: one model that
	// every worker serves, or by the name they report (--enable-igw), when
	// requests name their model. Either way the models are entries of the
	// server's table (Server.Models), added as their workers join.
	Models modeltable.Grouping
	// ReasoningParser is --reasoning-parser: how Chat answers' reasoning is
	// split from their content ("" or "auto": detected from each model's
	// vocabulary; "none"; or a style's name), unless a request says.
	ReasoningParser string
	// ToolCallParser is --tool-call-parser: how Chat answers' tool calls are
	// found ("" or "auto": the format the model's chat template writes;
	// "none"; or a format's name), unless a request says.
	ToolCallParser string
	// Metrics may be nil; the server then creates its own.
	Metrics *Metrics
	// Logger may be nil: slog.Default().
	Logger *slog.Logger
	// AbortTimeout bounds the Abort call sent to a worker when a client goes
	// away. Default 2 s.
	AbortTimeout time.Duration
	// Reliability sets retries and timeouts; nil: DefaultReliability().
	Reliability *Reliability
	// Admission bounds the requests accepted; nil: DefaultAdmissionConfig().
	Admission *AdmissionConfig
	// Fleet, when set, serves Admin.AddWorker and Admin.RemoveWorker.
	Fleet Fleet
	// KVEvents, when set, reports each worker's KV event subscription for
	// ListWorkers.
	KVEvents KVEventStatuser
	// Credentials secure the listeners (TLS, mutual TLS); nil: plaintext.
	Credentials credentials.TransportCredentials
	// Auth checks API keys; nil: every service is open.
	Auth *auth.Authenticator
	// SeparateAdmin serves the Admin service on a server of its own
	// (ServeAdmin) instead of beside Router.
	SeparateAdmin bool
	// MaxRequestBytes bounds one request message; larger ones are refused
	// with RESOURCE_EXHAUSTED before they are decoded. 0: DefaultMaxRequestBytes.
	MaxRequestBytes int
	// MaxEngineAnswerBytes is the largest message the engine connections
	// accept (workers.ConnectOptions.MaxAnswerBytes): a request whose
	// answer could be larger is refused before it is sent. 0:
	// workers.DefaultMaxAnswerBytes.
	MaxEngineAnswerBytes int
	// TracerProvider, when set, traces every Router call: a server span per
	// request (continuing a client's W3C traceparent) with a span per
	// pipeline step. nil: tracing is off, and no trace context is read.
	TracerProvider trace.TracerProvider
}

// DefaultMaxRequestBytes bounds a request message: 8 MiB holds a prompt of
// two million token ids or a 131,072-token context in any text encoding.
const DefaultMaxRequestBytes = 8 << 20

// Reliability is how the pipeline treats failing workers (see
// pipeline.Reliability).
type Reliability = pipeline.Reliability

// RetryConfig says when a failed request is tried on another worker (see
// pipeline.RetryConfig).
type RetryConfig = pipeline.RetryConfig

// DefaultReliability returns the pipeline's defaults for retries and
// timeouts.
func DefaultReliability() Reliability { return pipeline.DefaultReliability() }

// DefaultRetryConfig returns the pipeline's retry defaults.
func DefaultRetryConfig() RetryConfig { return pipeline.DefaultRetryConfig() }

// Server is a configured kvgate gRPC server.
type Server struct {
	// pipe is the request path the services hand their jobs to.
	pipe   *pipeline.Pipeline
	models *modeltable.Table[pipeline.Placer]
	reg    *workers.Registry
	// metrics are the server's; the pipeline's are registered in them.
	metrics *Metrics
	log     *slog.Logger
	// tracer makes the request spans (a no-op without a TracerProvider).
	tracer trace.Tracer
	traced bool // a TracerProvider was given
	// abortTimeout bounds an Abort a cut request sends (Config's).
	abortTimeout time.Duration
	// hardStop ends when a shutdown's drain period is over: requests still
	// running are cut then.
	hardStop context.Context
	// reasoningParser and toolCallParser are Config's.
	reasoningParser string
	toolCallParser  string

	admission *admission
	fleet     Fleet
	// prop reads a client's trace context from its metadata.
	prop     tracing.Propagator
	kvEvents KVEventStatuser
	// endRequests cuts the requests still running (the pipeline's
	// hardStop) when a shutdown's drain period is over.
	endRequests context.CancelFunc

	grpc   *grpc.Server
	admin  *grpc.Server // nil: Admin is served by grpc
	health *health.Server
}

// routerService is the name the health service reports for generation: it is
// SERVING while at least one worker is healthy.
const routerService = "kvgate.v1.Router"

// streamWorkers is how many goroutines the gRPC server keeps to run calls
// on. A call on a fresh goroutine grows its stack from 8 KiB to the depth
// of the request path (interceptors, the pipeline, the policy), copying it
// at each doubling: 7% of the router's CPU per 1K-token request in a
// profile. A kept goroutine has grown already. Calls beyond this many at
// once get a goroutine of their own, as without workers; grpc-go replaces
// a worker after 65,536 calls, so a grown stack is not kept for ever.
const streamWorkers = 64

// New builds a server with its services and interceptors registered. Call
// Serve to start it.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Registry == nil:
		return nil, errors.New("server: Registry is required")
	}
	rel := DefaultReliability()
	if cfg.Reliability != nil {
		rel = *cfg.Reliability
	}
	if err := rel.Validate(); err != nil {
		return nil, err
	}
	if err := answer.ValidateReasoningParser(cfg.ReasoningParser); err != nil {
		return nil, fmt.Errorf("--reasoning-parser: %w", err)
	}
	if err := answer.ValidateToolCallParser(cfg.ToolCallParser); err != nil {
		return nil, fmt.Errorf("--tool-call-parser: %w", err)
	}
	adm := DefaultAdmissionConfig()
	if cfg.Admission != nil {
		adm = *cfg.Admission
	}
	if err := adm.Validate(); err != nil {
		return nil, err
	}
	maxMsg := cfg.MaxRequestBytes
	if maxMsg == 0 {
		maxMsg = DefaultMaxRequestBytes
	}
	hardStop, endRequests := context.WithCancel(context.Background())
	s := &Server{
		reg:             cfg.Registry,
		metrics:         cfg.Metrics,
		log:             cmp.Or(cfg.Logger, slog.Default()),
		tracer:          noop.NewTracerProvider().Tracer(tracerName),
		hardStop:        hardStop,
		reasoningParser: cfg.ReasoningParser,
		toolCallParser:  cfg.ToolCallParser,
		fleet:           cfg.Fleet,
		kvEvents:        cfg.KVEvents,
		health:          health.NewServer(),
		endRequests:     endRequests,
	}
	if s.metrics == nil {
		s.metrics = NewMetrics(s.reg)
	}
	if s.abortTimeout = cfg.AbortTimeout; s.abortTimeout <= 0 {
		s.abortTimeout = 2 * time.Second
	}
	if cfg.TracerProvider != nil {
		s.tracer, s.traced = cfg.TracerProvider.Tracer(tracerName), true
	}
	s.admission = newAdmission(adm, s.metrics)
	pc := pipeline.Config{
		Reliability: rel, AbortTimeout: s.abortTimeout, MaxEngineAnswer: cmp.Or(cfg.MaxEngineAnswerBytes, workers.DefaultMaxAnswerBytes),
		Registry: s.reg, Metrics: s.metrics.pipe, Logger: s.log, Stop: hardStop, Logprobs: s.admission.logprobs, EndSpan: endSpan,
		Binding: s.admission.binding(),
	}
	if s.traced {
		pc.Tracer = s.tracer
	}
	s.pipe = pipeline.New(pc)
	s.models = modeltable.New(cfg.Models, s.newPlacer)
	if l := s.admission.limiter; l != nil {
		s.metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kvgate_rate_limit_keys",
			Help: "Client keys the per-key rate limiter remembers (at most 100,000, least recently seen forgotten first).",
		}, func() float64 { return float64(l.keys()) }))
	}
	s.metrics.registerAdmissionGauges(s.pipe.Waiting, s.pipe.InFlight)
	s.metrics.Registry.MustRegister(s.admission.awaitingGauge())
	// The packages that measure define these series; the router only
	// says which of their objects to read.
	for _, c := range []prometheus.Collector{cache.NewCollector(s.tokenizerStats), policy.NewCollector(s.servedPolicies),
		workers.NewKVModeCollector(s.reg, cfg.KVEvents)} {
		if err := s.metrics.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("server: metrics: %w", err)
		}
	}

	recoverOpts := []recovery.Option{recovery.WithRecoveryHandlerContext(s.recoverPanic)}
	// Health probes and reflection would drown the request log: the access
	// log writes only the calls the metrics count (monitored).
	access := accessLog{s.log}
	unary := []grpc.UnaryServerInterceptor{
		s.requestUnary,
		access.unary,
		s.metrics.UnaryInterceptor,
		edgeUnary,
		recovery.UnaryServerInterceptor(recoverOpts...),
	}
	stream := []grpc.StreamServerInterceptor{
		s.requestStream,
		access.stream,
		s.metrics.StreamInterceptor,
		edgeStream,
		recovery.StreamServerInterceptor(recoverOpts...),
	}
	unary = append(unary, rejectUndecodableUnary, s.admissionUnary)
	stream = append(stream, rejectUndecodableStream, s.admissionStream)
	newServer := func() *grpc.Server {
		opts := []grpc.ServerOption{
			grpc.ChainUnaryInterceptor(unary...),
			grpc.ChainStreamInterceptor(stream...),
			grpc.ForceServerCodecV2(newRequestCodec()),
			grpc.MaxRecvMsgSize(maxMsg),
			grpc.NumStreamWorkers(streamWorkers),
		}
		// Authentication comes before anything reads the request's bytes:
		// the tap refuses a call from its headers, on every listener, for
		// unary and streaming RPCs alike (see auth.Authenticator.Tap).
		if cfg.Auth != nil {
			opts = append(opts, grpc.InTapHandle(cfg.Auth.Tap(s.refused)))
		}
		if cfg.Credentials != nil {
			opts = append(opts, grpc.Creds(cfg.Credentials))
		}
		g := grpc.NewServer(opts...)
		healthpb.RegisterHealthServer(g, s.health)
		reflection.Register(g)
		return g
	}
	s.grpc = newServer()
	kvgatev1.RegisterRouterServer(s.grpc, &router{s: s})
	adminSrv := s.grpc
	if cfg.SeparateAdmin {
		s.admin = newServer()
		adminSrv = s.admin
	}
	kvgatev1.RegisterAdminServer(adminSrv, &admin{s: s, reg: s.reg})
	s.UpdateHealth()
	return s, nil
}

// GRPC exposes the underlying server, for registering more services before Serve.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Metrics returns the server's metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

// Serve accepts connections on lis until Stop.
func (s *Server) Serve(lis net.Listener) error { return s.grpc.Serve(lis) }

// ServeAdmin serves the Admin service on lis until Stop, when it was
// configured apart (Config.SeparateAdmin).
func (s *Server) ServeAdmin(lis net.Listener) error {
	if s.admin == nil {
		return errors.New("server: Admin is served beside Router; ServeAdmin needs Config.SeparateAdmin")
	}
	return s.admin.Serve(lis)
}

// Stop shuts the server down: health turns NOT_SERVING, new calls are
// refused, and running requests may finish until ctx ends. Those still
// running then are aborted on their engines and end with UNAVAILABLE
// ("kvgate is shutting down"), and the server closes.
func (s *Server) Stop(ctx context.Context) {
	s.health.Shutdown()
	if s.admin != nil {
		// Admin calls are short; they finish within the drain or are cut.
		adminDone := make(chan struct{})
		go func() {
			s.admin.GracefulStop()
			close(adminDone)
		}()
		defer func() {
			select {
			case <-adminDone:
			case <-ctx.Done():
				s.admin.Stop()
				<-adminDone
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	s.endRequests()
	// The cut requests abort their engines and send their status; give them
	// the time an Abort may take, then close whatever is left.
	t := time.NewTimer(s.abortTimeout + time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
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

// refused counts and logs a call the authenticator refused. Such a call
// never reaches the interceptors, so it is recorded here as they would:
// in the request metrics by method and code, and as the access log's
// "finished call" line at its level (INFO for UNAUTHENTICATED).
func (s *Server) refused(ctx context.Context, fullMethod string, err error) {
	if !monitored(fullMethod) {
		return
	}
	s.metrics.observe(fullMethod, err, 0)
	accessLog{s.log}.finished(ctx, fullMethod, "", time.Time{}, err)
}

// recoverPanic turns a handler panic into an error that carries no fault, a
// bug, which the edge answers with INTERNAL for that one RPC; it logs the
// stack, and the process keeps serving everyone else.
func (s *Server) recoverPanic(ctx context.Context, p any) error {
	s.log.ErrorContext(ctx, "panic in handler", "panic", p, "stack", string(debug.Stack()))
	return errors.New("internal error")
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
		resp.Workers = append(resp.Workers, a.workerPB(w))
	}
	return resp, nil
}

func protocolPB(p workers.Protocol) kvgatev1.Protocol {
	switch p {
	case workers.ProtocolSGLang:
		return kvgatev1.Protocol_PROTOCOL_SGLANG
	case workers.ProtocolVLLM:
		return kvgatev1.Protocol_PROTOCOL_VLLM
	case workers.ProtocolTRTLLM:
		return kvgatev1.Protocol_PROTOCOL_TRTLLM
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

package server

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/internal/stackroom"
)

// tracerName names kvgate's instrumentation in exported spans.
const tracerName = "github.com/kvgate/kvgate/server"

// Span attribute keys of the call's own spans (the pipeline's steps have
// theirs in package pipeline). The rpc.* ones are OpenTelemetry's semantic
// conventions for gRPC; the kvgate.* ones are ours.
const (
	attrGRPCStatus    = attribute.Key("rpc.grpc.status_code")
	attrRequestID     = attribute.Key("kvgate.request_id")
	attrPromptTokens  = attribute.Key("kvgate.prompt_tokens")
	attrTokenizeCache = attribute.Key("kvgate.tokenize.cache")
)

// requestStream prepares a Router call's context before anything else
// sees it: the label its log line is named by, and, with tracing on, the
// request span, which continues the client's trace when the call's
// metadata carries a W3C traceparent and ends with the call's gRPC status.
// It runs first, so that everything after it (admission, the access log,
// the pipeline) logs with the request's id and trace, and a rejected
// request still leaves a span.
func (s *Server) requestStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !admitted(info.FullMethod) {
		return handler(srv, ss)
	}
	// The stream worker's stack shrinks while it is idle; the request path
	// would grow it back a doubling at a time, copied deep in the pipeline.
	stackroom.Reserve32K()
	return s.request(ss.Context(), info.FullMethod, func(ctx context.Context) error {
		return handler(srv, &tracedStream{ServerStream: ss, ctx: ctx})
	})
}

// requestUnary is requestStream for the Router's unary RPCs (Embed).
func (s *Server) requestUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	if !admitted(info.FullMethod) {
		return handler(ctx, req)
	}
	err = s.request(ctx, info.FullMethod, func(ctx context.Context) error {
		resp, err = handler(ctx, req)
		return err
	})
	return resp, err
}

// request runs a Router call's handler on the context requestStream
// describes.
func (s *Server) request(ctx context.Context, fullMethod string, handler func(context.Context) error) error {
	ctx = withLabel(ctx)
	if !s.traced {
		return handler(ctx)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	ctx = s.prop.Extract(ctx, md)
	name := strings.TrimPrefix(fullMethod, "/")
	service, method, _ := strings.Cut(name, "/")
	ctx, span := s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("rpc.system", "grpc"), attribute.String("rpc.service", service), attribute.String("rpc.method", method)))
	defer span.End()
	err := handler(ctx)
	endSpan(span, err)
	return err
}

// tracedStream is a server stream with the context requestStream made.
type tracedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (t *tracedStream) Context() context.Context { return t.ctx }

// endSpan records a call's or a step's outcome: the gRPC status code the
// edge (statusOf) gives err, and an Error status with the message for
// anything but OK.
func endSpan(span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	st := status.Convert(statusOf(err))
	span.SetAttributes(attrGRPCStatus.Int(int(st.Code())))
	if st.Code() != codes.OK {
		span.SetStatus(otelcodes.Error, st.Message())
	}
}

// startStep opens a step's span (tokenize) under the request span of ctx.
// Without a recording request span (tracing off, a trace not sampled, or an
// Admin call such as Explain that runs the same steps) it opens nothing, so
// that no step ever starts a trace of its own.
func (s *Server) startStep(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return s.tracer.Start(ctx, name, opts...)
}

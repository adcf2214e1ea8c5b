package workers

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// A Propagator writes the caller's trace context into a call's outgoing
// metadata (an OpenTelemetry propagation.TextMapPropagator does, over a
// carrier of the metadata). Connect installs it in the worker's client
// interceptors when ConnectOptions.Propagator is set, so that every call to
// an engine, whatever its protocol, continues the router's trace.
type Propagator interface {
	InjectMD(ctx context.Context, md metadata.MD)
}

// legContextKey holds the function that picks, per worker, the context
// whose trace a call carries.
type legContextKey struct{}

// WithLegContexts returns ctx carrying pick, which the tracing interceptor
// asks for the context of a call to the worker at url (nil: ctx itself). A
// disaggregated request sends its two legs on one context; this lets each
// leg carry its own span to its engine.
func WithLegContexts(ctx context.Context, pick func(url string) context.Context) context.Context {
	return context.WithValue(ctx, legContextKey{}, pick)
}

// traceContext is the context whose trace a call to url carries.
func traceContext(ctx context.Context, url string) context.Context {
	if pick, ok := ctx.Value(legContextKey{}).(func(string) context.Context); ok {
		if c := pick(url); c != nil {
			return c
		}
	}
	return ctx
}

// injectTrace adds the trace context of ctx (or of the leg picked for url)
// to the outgoing metadata. Calls outside a trace (health checks, load
// polls) are left as they are, without copying their metadata.
func injectTrace(ctx context.Context, p Propagator, url string) context.Context {
	add := metadata.MD{}
	p.InjectMD(traceContext(ctx, url), add)
	if len(add) == 0 {
		return ctx
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	md = metadata.Join(md, add)
	return metadata.NewOutgoingContext(ctx, md)
}

// traceInterceptors propagate the trace context on every call of a worker's
// connection.
func traceInterceptors(p Propagator, url string) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(injectTrace(ctx, p, url), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(injectTrace(ctx, p, url), desc, cc, method, opts...)
		}),
	}
}

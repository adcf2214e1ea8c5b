package tracing

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc/metadata"
)

// MDCarrier lets a propagator read and write W3C trace context
// (traceparent, tracestate) in gRPC metadata, whose keys are lower case.
type MDCarrier metadata.MD

// Get returns the first value of key.
func (c MDCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces key's values with value.
func (c MDCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

// Keys lists the keys present.
func (c MDCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Propagator is W3C trace context over gRPC metadata: the server extracts
// a client's traceparent with it, and the worker connections inject the
// router's. It is a value, not the otel global propagator, so nothing a
// library sets globally changes what kvgate sends.
type Propagator struct{ tc propagation.TraceContext }

// Extract returns ctx with the remote span context md carries, if any.
func (p Propagator) Extract(ctx context.Context, md metadata.MD) context.Context {
	return p.tc.Extract(ctx, MDCarrier(md))
}

// InjectMD writes ctx's span context into md (nothing when ctx has no
// valid span context).
func (p Propagator) InjectMD(ctx context.Context, md metadata.MD) {
	p.tc.Inject(ctx, MDCarrier(md))
}

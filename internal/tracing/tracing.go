// Package tracing sets up kvgate's OpenTelemetry tracing: an OTLP/gRPC
// exporter configured the standard way (the OTEL_* environment variables)
// or by kvgate's flags, a parent-based ratio sampler, and the small pieces
// the server and the worker connections share (a metadata carrier for W3C
// trace context, a slog handler that stamps trace and span ids on log
// lines). Nothing here is global: Setup returns a provider the caller
// passes down and shuts down, and the otel global provider and propagator
// are left alone, so two routers in one process (tests, bench) never share
// or overwrite each other's tracing.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Options are kvgate's own tracing settings; everything else about the
// exporter (headers, TLS, timeouts, compression) comes from the standard
// OTEL_EXPORTER_OTLP_* variables, which the exporter reads itself.
type Options struct {
	// Endpoint is the collector's host:port (--otlp-endpoint). Empty: the
	// environment's OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT, and with neither tracing is off.
	Endpoint string
	// SamplingRatio is the share of new traces recorded (0..1); a request
	// that arrives with a trace context follows its parent's decision.
	SamplingRatio float64
	// ServiceVersion is reported as service.version.
	ServiceVersion string
}

// Provider is what Setup built: the TracerProvider to pass to the router,
// and Shutdown, which flushes the spans still buffered and stops the
// exporter. With tracing off, TracerProvider is a no-op, Enabled is false,
// and Shutdown does nothing.
type Provider struct {
	TracerProvider trace.TracerProvider
	Enabled        bool
	shutdown       func(context.Context) error
}

// Shutdown flushes and stops the exporter; ctx bounds how long the flush
// may take.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.shutdown == nil {
		return nil
	}
	if err := p.shutdown(ctx); err != nil {
		return fmt.Errorf("tracing shutdown: %w", err)
	}
	return nil
}

// Endpoint variables that turn tracing on without --otlp-endpoint.
const (
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envInsecure       = "OTEL_EXPORTER_OTLP_INSECURE"
	envTracesInsecure = "OTEL_EXPORTER_OTLP_TRACES_INSECURE"
)

// Enabled reports whether opts turn tracing on: an endpoint from the flag
// or from the environment.
func (o Options) Enabled() bool {
	return o.Endpoint != "" || o.env(envTracesEndpoint) != "" || o.env(envEndpoint) != ""
}

func (o Options) env(k string) string { return strings.TrimSpace(os.Getenv(k)) }

// Validate reports a setting out of range by its flag name.
func (o Options) Validate() error {
	if !(o.SamplingRatio >= 0 && o.SamplingRatio <= 1) {
		return fmt.Errorf("--otlp-sampling-ratio is %v; it must be between 0 and 1", o.SamplingRatio)
	}
	if o.Endpoint != "" && strings.Contains(o.Endpoint, "://") {
		return fmt.Errorf("--otlp-endpoint %q: give host:port without a scheme (TLS is chosen by %s)", o.Endpoint, envInsecure)
	}
	return nil
}

// Setup builds the tracer provider opts describe. With no endpoint it builds
// nothing (no exporter, no connection) and returns a no-op provider.
//
// --otlp-endpoint overrides the environment's endpoint and is plaintext
// (collectors usually run beside the router), unless
// OTEL_EXPORTER_OTLP_TRACES_INSECURE or OTEL_EXPORTER_OTLP_INSECURE is
// "false", which asks for TLS. The resource is service.name "kvgate" and
// service.version, which OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
// override.
func Setup(ctx context.Context, opts Options) (*Provider, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if !opts.Enabled() {
		return &Provider{TracerProvider: noop.NewTracerProvider()}, nil
	}
	var eopts []otlptracegrpc.Option
	if opts.Endpoint != "" {
		eopts = append(eopts, otlptracegrpc.WithEndpoint(opts.Endpoint))
		if !opts.tlsRequested() {
			eopts = append(eopts, otlptracegrpc.WithInsecure())
		}
	}
	// The exporter dials lazily: a collector that is down costs dropped
	// spans, never a router that does not start.
	exp, err := otlptracegrpc.New(ctx, eopts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := newResource(ctx, opts)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(opts.SamplingRatio))),
	)
	return &Provider{TracerProvider: tp, Enabled: true, shutdown: tp.Shutdown}, nil
}

// tlsRequested: the environment explicitly turns the insecure default off.
func (o Options) tlsRequested() bool {
	v := o.env(envTracesInsecure)
	if v == "" {
		v = o.env(envInsecure)
	}
	return strings.EqualFold(v, "false")
}

// newResource names the service; OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, read last, win over our values.
func newResource(ctx context.Context, opts Options) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{attribute.String("service.name", "kvgate")}
	if opts.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", opts.ServiceVersion))
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	return res, nil
}

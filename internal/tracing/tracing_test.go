package tracing_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/metadata"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/tracing"
)

// clearEnv makes a test independent of the OTEL variables of the shell
// that runs it.
func clearEnv(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_INSECURE",
		"OTEL_EXPORTER_OTLP_TRACES_INSECURE", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"} {
		t.Setenv(k, "")
	}
}

func TestTracingIsOffWithoutAnEndpoint(t *testing.T) {
	clearEnv(t)
	p, err := tracing.Setup(context.Background(), tracing.Options{SamplingRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	if p.Enabled {
		t.Fatal("tracing is on without an endpoint")
	}
	if _, ok := p.TracerProvider.(noop.TracerProvider); !ok {
		t.Fatalf("provider %T, want the no-op provider (no exporter built)", p.TracerProvider)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestSetupValidates(t *testing.T) {
	clearEnv(t)
	for _, o := range []tracing.Options{{SamplingRatio: -0.1}, {SamplingRatio: 1.5}, {Endpoint: "http://x:4317", SamplingRatio: 1}} {
		if _, err := tracing.Setup(context.Background(), o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// Spans reach a real OTLP receiver, by the flag's endpoint or by the
// standard variables, named as OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES say; with a ratio of 0, new traces are dropped.
func TestSpansReachTheCollector(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		flag    bool
		ratio   float64
		spans   int
		service string
	}{
		{"the flag's endpoint", nil, true, 1, 1, "kvgate"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://ADDR", "OTEL_SERVICE_NAME": "router-a"}, false, 1, 1, "router-a"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://ADDR",
			"OTEL_RESOURCE_ATTRIBUTES": "service.name=router-b,deployment.environment=test"}, false, 1, 1, "router-b"},
		{"a ratio of 0", nil, true, 0, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			recv := testutil.StartOTLPReceiver(t)
			for k, v := range tt.env {
				if v == "http://ADDR" {
					v = "http://" + recv.Addr()
				}
				t.Setenv(k, v)
			}
			o := tracing.Options{SamplingRatio: tt.ratio, ServiceVersion: "v9"}
			if tt.flag {
				o.Endpoint = recv.Addr()
			}
			p, err := tracing.Setup(context.Background(), o)
			if err != nil || !p.Enabled {
				t.Fatalf("setup: %v, enabled %v", err, p.Enabled)
			}
			_, span := p.TracerProvider.Tracer("test").Start(context.Background(), "op")
			span.End()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := p.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			got := recv.Spans()
			if len(got) != tt.spans {
				t.Fatalf("%d spans received, want %d", len(got), tt.spans)
			}
			if tt.spans > 0 {
				if s := got[0].Resource["service.name"]; s != tt.service {
					t.Errorf("service.name %q, want %q", s, tt.service)
				}
				if v := got[0].Resource["service.version"]; v != "v9" {
					t.Errorf("service.version %q", v)
				}
			}
		})
	}
}

func TestPropagatorRoundTripsThroughMetadata(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var p tracing.Propagator
	ctx := p.Extract(context.Background(), metadata.Pairs("traceparent", tp, "tracestate", "k=v"))
	out := metadata.MD{}
	p.InjectMD(ctx, out)
	if got := out.Get("traceparent"); len(got) != 1 || got[0] != tp {
		t.Fatalf("traceparent %q, want %q", got, tp)
	}
	if got := out.Get("tracestate"); len(got) != 1 || got[0] != "k=v" {
		t.Fatalf("tracestate %q", got)
	}
	empty := metadata.MD{}
	p.InjectMD(context.Background(), empty)
	if len(empty) != 0 {
		t.Fatalf("no span context injected %v", empty)
	}
}

// OTEL_EXPORTER_OTLP_INSECURE=false makes the flag's endpoint TLS: a
// plaintext collector then receives nothing (the flush gives up at its
// deadline), where without the variable it receives the span (above).
func TestInsecureFalseAsksForTLS(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "false")
	recv := testutil.StartOTLPReceiver(t)
	p, err := tracing.Setup(context.Background(), tracing.Options{Endpoint: recv.Addr(), SamplingRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.TracerProvider.Tracer("test").Start(context.Background(), "op")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = p.Shutdown(ctx) // fails: the handshake cannot succeed
	if n := recv.Requests(); n != 0 {
		t.Fatalf("a plaintext collector received %d exports over what should be TLS", n)
	}
}

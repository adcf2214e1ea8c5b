package workers_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/tracing"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// seen records the traceparent of each call an engine receives, by method.
type seen struct {
	mu sync.Mutex
	tp map[string][]string
}

func (s *seen) ObserveCall(method string, md metadata.MD) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := md.Get("traceparent")
	if len(v) == 0 {
		v = []string{""}
	}
	name := method[strings.LastIndex(method, "/")+1:]
	s.tp[name] = append(s.tp[name], v[0])
}

func (s *seen) get(method string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.tp[method]...)
}

func spanContext(traceByte, spanByte byte) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{traceByte, 1}, SpanID: trace.SpanID{spanByte, 2}, TraceFlags: trace.FlagsSampled})
}

func traceparentOf(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
}

// Every call on a worker connected with a Propagator carries the caller's
// trace, whatever the engine's protocol and whether the call streams
// (Generate) or not (Abort); WithLegContexts picks a context per worker;
// calls outside a trace carry none.
func TestConnectPropagatesTheTrace(t *testing.T) {
	for _, proto := range []string{sim.ProtocolSGLang, sim.ProtocolVLLM} {
		t.Run(proto, func(t *testing.T) {
			rec := &seen{tp: map[string][]string{}}
			cfg := sim.DefaultConfig()
			cfg.Protocol, cfg.TimeScale, cfg.Calls = proto, 0, rec
			srv, err := sim.Start(cfg, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Stop)
			w, err := workers.Connect(testutil.Context(t, 5*time.Second), srv.Addr(), workers.ConnectOptions{Propagator: tracing.Propagator{}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.Close() })

			caller, leg := spanContext(0xa, 0xb), spanContext(0xa, 0xc)
			ctx := trace.ContextWithSpanContext(testutil.Context(t, 5*time.Second), caller)
			req := &workers.GenerateRequest{RequestID: "r1", InputIDs: testutil.Tokens(5, 8), Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](2)}}
			s, err := w.Backend().Generate(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			drain(t, s)
			_ = w.Backend().Abort(ctx, "r1")
			// A leg context for this worker wins over the caller's.
			legs := workers.WithLegContexts(ctx, func(url string) context.Context {
				if url == w.URL() {
					return trace.ContextWithSpanContext(context.Background(), leg)
				}
				return nil
			})
			req.RequestID = "r2"
			s, err = w.Backend().Generate(legs, req)
			if err != nil {
				t.Fatal(err)
			}
			drain(t, s)
			// Outside a trace: nothing.
			_ = w.Backend().Health(testutil.Context(t, 5*time.Second))

			if got, want := rec.get("Generate"), []string{traceparentOf(caller), traceparentOf(leg)}; strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("Generate traceparents %q, want %q", got, want)
			}
			if got := rec.get("Abort"); len(got) != 1 || got[0] != traceparentOf(caller) {
				t.Errorf("Abort traceparents %q", got)
			}
			if got := rec.get("HealthCheck"); len(got) == 0 || got[len(got)-1] != "" {
				t.Errorf("HealthCheck traceparents %q, want none", got)
			}
		})
	}
}

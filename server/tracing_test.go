package server_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/tracing"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// The client's trace: what a traced caller of kvgate sends.
const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
	traceparent   = "00-" + clientTraceID + "-" + clientSpanID + "-01"
)

// calls records the traceparent of every Generate and Embed an engine
// receives.
type calls struct {
	mu  sync.Mutex
	got []string // "method traceparent"
}

func (c *calls) ObserveCall(method string, md metadata.MD) {
	if !strings.HasSuffix(method, "/Generate") && !strings.HasSuffix(method, "/Embed") {
		return
	}
	tp := ""
	if v := md.Get("traceparent"); len(v) > 0 {
		tp = v[0]
	}
	c.mu.Lock()
	c.got = append(c.got, tp)
	c.mu.Unlock()
}

func (c *calls) traceparents() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}

// tracedFleet is a router exporting to a real OTLP receiver; flush shuts
// its tracer provider down, which sends every span still buffered.
type tracedFleet struct {
	*fleet
	recv    *testutil.OTLPReceiver
	engines []*calls
	flush   func()
	tp      *tracing.Provider
}

func startTracedFleet(t testing.TB, o fleetOptions) *tracedFleet {
	t.Helper()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_SERVICE_NAME", "kvgate-test")
	tf := &tracedFleet{recv: testutil.StartOTLPReceiver(t)}
	p, err := tracing.Setup(context.Background(), tracing.Options{Endpoint: tf.recv.Addr(), SamplingRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Enabled {
		t.Fatal("tracing with an endpoint is not enabled")
	}
	tf.tp = p
	tf.flush = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Fatalf("flush: %v", err)
		}
	}
	n := o.workers
	if n == 0 {
		n = 2
	}
	for range n {
		tf.engines = append(tf.engines, &calls{})
	}
	tweak := o.sim
	o.sim = func(i int, c *sim.Config) {
		c.Calls = tf.engines[i]
		if tweak != nil {
			tweak(i, c)
		}
	}
	tweakG := o.config
	o.config = func(c *router.Config) {
		c.TracerProvider = p.TracerProvider
		if tweakG != nil {
			tweakG(c)
		}
	}
	tf.fleet = startFleet(t, o)
	return tf
}

// trace indexes the spans of one trace by name.
type traceSpans map[string][]testutil.Span

func (tf *tracedFleet) trace(t *testing.T, traceID string) traceSpans {
	t.Helper()
	ts := traceSpans{}
	for _, s := range tf.recv.Spans() {
		if s.TraceID() == traceID {
			ts[s.Name] = append(ts[s.Name], s)
		}
	}
	return ts
}

// one returns the single span of that name and its parent's check.
func (ts traceSpans) one(t *testing.T, name string) testutil.Span {
	t.Helper()
	if len(ts[name]) != 1 {
		t.Fatalf("%d spans named %q, want 1 (have %v)", len(ts[name]), name, ts.names())
	}
	return ts[name][0]
}

func (ts traceSpans) names() []string {
	var n []string
	for k := range ts {
		n = append(n, k)
	}
	return n
}

func wantAttrs(t *testing.T, s testutil.Span, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := s.Attr(k); got != v {
			t.Errorf("span %s: %s = %q, want %q", s.Name, k, got, v)
		}
	}
}

func wantChild(t *testing.T, child, parent testutil.Span) {
	t.Helper()
	if child.ParentSpanID() != parent.SpanID() {
		t.Errorf("span %s's parent is %s, want %s (%s)", child.Name, child.ParentSpanID(), parent.Name, parent.SpanID())
	}
}

func TestTracingChatContinuesTheClientsTrace(t *testing.T) {
	tf := startTracedFleet(t, fleetOptions{text: true})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent, "x-request-id", "chat-1")
	req := &kvgatev1.ChatRequest{Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "hello there"}},
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(4), IgnoreEos: true}}
	r, err := tf.chat(ctx, t, req)
	if err != nil || r.complete == nil {
		t.Fatalf("Chat: %v, completion %v", err, r.complete)
	}
	// The same conversation again, in another trace, is served by the
	// tokenizer's L0 cache.
	const againTrace = "0af7651916cd43dd8448eb211c80319c"
	actx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+againTrace+"-b7ad6b7169203331-01")
	if _, err := tf.chat(actx, t, req); err != nil {
		t.Fatal(err)
	}
	tf.flush()
	again := tf.trace(t, againTrace).one(t, "kvgate.chat_template")
	wantAttrs(t, again, map[string]string{"kvgate.tokenize.cache": "l0"})

	ts := tf.trace(t, clientTraceID)
	root := ts.one(t, "kvgate.v1.Router/Chat")
	if root.ParentSpanID() != clientSpanID {
		t.Fatalf("request span's parent %s, want the client's span %s", root.ParentSpanID(), clientSpanID)
	}
	if root.Kind.String() != "SPAN_KIND_SERVER" || root.Resource["service.name"] != "kvgate-test" {
		t.Errorf("request span kind %v, service %q", root.Kind, root.Resource["service.name"])
	}
	u := r.complete.Usage
	wantAttrs(t, root, map[string]string{
		"rpc.grpc.status_code":           "0",
		"rpc.method":                     "Chat",
		"kvgate.request_id":              "chat-1",
		"kvgate.usage.prompt_tokens":     itoa(u.PromptTokens),
		"kvgate.usage.completion_tokens": "4",
		"kvgate.usage.cached_tokens":     itoa(u.CachedTokens),
		"kvgate.finish_reason":           "length",
		"kvgate.worker":                  r.complete.Worker,
	})
	if !root.HasEvent("first_token") {
		t.Error("request span has no first_token event")
	}

	tmpl := ts.one(t, "kvgate.chat_template")
	wantChild(t, tmpl, root)
	wantAttrs(t, tmpl, map[string]string{"kvgate.prompt_tokens": itoa(u.PromptTokens), "kvgate.tokenize.cache": "miss"})

	sel := ts.one(t, "kvgate.select")
	wantChild(t, sel, root)
	wantAttrs(t, sel, map[string]string{"kvgate.policy": "round_robin", "kvgate.worker": r.complete.Worker, "kvgate.attempt": "0",
		"kvgate.predicted_cached_tokens": "0"})
	if sel.Attr("kvgate.policy.branch") == "" {
		t.Error("select span has no branch")
	}

	leg := ts.one(t, "kvgate.dispatch regular")
	wantChild(t, leg, root)
	if leg.Kind.String() != "SPAN_KIND_CLIENT" {
		t.Errorf("dispatch span kind %v", leg.Kind)
	}
	wantAttrs(t, leg, map[string]string{"kvgate.worker.url": r.complete.Worker, "kvgate.worker.role": "regular",
		"kvgate.attempt": "0", "rpc.grpc.status_code": "0"})

	// The engine that served the request received the dispatch span as its
	// parent, in the client's trace.
	want := "00-" + clientTraceID + "-" + leg.SpanID() + "-01"
	var got []string
	for _, e := range tf.engines {
		for _, tp := range e.traceparents() {
			if strings.Contains(tp, clientTraceID) {
				got = append(got, tp)
			}
		}
	}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("engines received Generate traceparents %q in the client's trace, want [%q]", got, want)
	}

}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// A disaggregated request has a prefill and a decode leg under its request
// span, and each engine receives its own leg's span as its parent.
func TestTracingPDShowsBothLegs(t *testing.T) {
	for _, proto := range pdProtocols {
		t.Run(proto, func(t *testing.T) {
			tf := startTracedFleet(t, fleetOptions{protocol: proto, workers: 4, pd: true,
				config: func(c *router.Config) { c.PrefillPolicy, c.DecodePolicy = "cache_aware", "power_of_two" }})
			ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent)
			r, err := tf.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(10, 64),
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(3), IgnoreEos: true}})
			if err != nil || r.complete == nil {
				t.Fatalf("Generate: %v", err)
			}
			tf.flush()
			ts := tf.trace(t, clientTraceID)
			root := ts.one(t, "kvgate.v1.Router/Generate")
			sel := ts.one(t, "kvgate.select")
			wantChild(t, sel, root)
			wantAttrs(t, sel, map[string]string{"kvgate.policy": "cache_aware", "kvgate.prefill.worker": r.complete.PrefillWorker,
				"kvgate.worker": r.complete.Worker, "kvgate.decode.policy": "power_of_two"})
			if _, ok := ts["kvgate.tokenize"]; ok {
				t.Error("a token-id request has a tokenize span")
			}
			for _, l := range []struct{ role, worker string }{{"prefill", r.complete.PrefillWorker}, {"decode", r.complete.Worker}} {
				leg := ts.one(t, "kvgate.dispatch "+l.role)
				wantChild(t, leg, root)
				wantAttrs(t, leg, map[string]string{"kvgate.worker.role": l.role, "kvgate.worker.url": l.worker,
					"kvgate.attempt": "0", "rpc.grpc.status_code": "0"})
				// The engine behind the leg got the leg's span.
				want := "00-" + clientTraceID + "-" + leg.SpanID() + "-01"
				found := false
				for i, e := range tf.engines {
					for _, tp := range e.traceparents() {
						if tp == want {
							found = tf.workerURL(i) == l.worker
						}
					}
				}
				if !found {
					t.Errorf("the %s engine %s did not receive traceparent %s", l.role, l.worker, want)
				}
			}
		})
	}
}

// A failed attempt's leg is recorded with its status, and the retry is a
// second leg with the next attempt number; the request span ends OK.
func TestTracingRecordsAFailedAttempt(t *testing.T) {
	tf := startTracedFleet(t, fleetOptions{
		sim: func(i int, c *sim.Config) { c.Faults.Unavailable = i == 0 }})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent)
	r, err := tf.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8),
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}})
	if err != nil {
		t.Fatal(err)
	}
	tf.flush()
	ts := tf.trace(t, clientTraceID)
	legs := ts["kvgate.dispatch regular"]
	if len(legs) != 2 {
		t.Fatalf("%d dispatch spans, want 2 (a failure and its retry)", len(legs))
	}
	byAttempt := map[string]testutil.Span{}
	for _, l := range legs {
		byAttempt[l.Attr("kvgate.attempt")] = l
	}
	failed, retried := byAttempt["0"], byAttempt["1"]
	if failed.Span == nil || retried.Span == nil {
		t.Fatalf("attempts %v", byAttempt)
	}
	if failed.Status.GetCode().String() != "STATUS_CODE_ERROR" || failed.Attr("rpc.grpc.status_code") != "14" ||
		failed.Attr("kvgate.worker.url") != tf.workerURL(0) {
		t.Errorf("failed attempt: status %v, code %s, worker %s", failed.Status, failed.Attr("rpc.grpc.status_code"), failed.Attr("kvgate.worker.url"))
	}
	if retried.Attr("kvgate.worker.url") != r.complete.Worker || retried.Status.GetCode().String() == "STATUS_CODE_ERROR" {
		t.Errorf("retry: worker %s, status %v", retried.Attr("kvgate.worker.url"), retried.Status)
	}
	if n := len(ts["kvgate.select"]); n != 2 {
		t.Errorf("%d select spans, want 2", n)
	}
	root := ts.one(t, "kvgate.v1.Router/Generate")
	wantAttrs(t, root, map[string]string{"rpc.grpc.status_code": "0"})
}

// A request the router refuses ends its span with the status as an error.
func TestTracingRecordsARejection(t *testing.T) {
	tf := startTracedFleet(t, fleetOptions{})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent)
	_, err := tf.generate(ctx, t, &kvgatev1.GenerateRequest{})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty prompt: %v", err)
	}
	tf.flush()
	root := tf.trace(t, clientTraceID).one(t, "kvgate.v1.Router/Generate")
	if root.Status.GetCode().String() != "STATUS_CODE_ERROR" || root.Attr("rpc.grpc.status_code") != "3" ||
		root.Status.GetMessage() != status.Convert(err).Message() {
		t.Fatalf("rejected request span: status %v, code %s", root.Status, root.Attr("rpc.grpc.status_code"))
	}
}

// With tracing off, a client's traceparent goes no further: the engines
// receive none (no interceptor is installed).
func TestTracingOffPropagatesNothing(t *testing.T) {
	rec := &calls{}
	f := startFleet(t, fleetOptions{workers: 1, sim: func(_ int, c *sim.Config) { c.Calls = rec }})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent)
	if _, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8),
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}}); err != nil {
		t.Fatal(err)
	}
	got := rec.traceparents()
	if len(got) != 1 || got[0] != "" {
		t.Fatalf("the engine's Generate calls carried traceparents %q, want one call with none", got)
	}
}

// An Embed call has the spans of any request: the request span continuing
// the client's trace (with the usage and the worker), one tokenize span
// for the batch's texts, the selection and the dispatch leg, whose span
// each of the engine's Embed calls receives as its parent.
func TestTracingEmbed(t *testing.T) {
	tf := startTracedFleet(t, fleetOptions{text: true})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent, "x-request-id", "embed-1")
	req := &kvgatev1.EmbedRequest{Inputs: []*kvgatev1.EmbedInput{{Text: "first text"}, {InputIds: prompt(3, 5)}, {Text: "second text"}}}
	resp, err := tf.router.Embed(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	const againTrace = "0af7651916cd43dd8448eb211c80319d"
	actx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+againTrace+"-b7ad6b7169203331-01")
	if _, err := tf.router.Embed(actx, req); err != nil {
		t.Fatal(err)
	}
	tf.flush()
	wantAttrs(t, tf.trace(t, againTrace).one(t, "kvgate.tokenize"), map[string]string{"kvgate.tokenize.cache": "l0"})

	ts := tf.trace(t, clientTraceID)
	root := ts.one(t, "kvgate.v1.Router/Embed")
	if root.ParentSpanID() != clientSpanID {
		t.Fatalf("request span's parent %s, want the client's span %s", root.ParentSpanID(), clientSpanID)
	}
	tokens := itoa(resp.Usage.PromptTokens)
	wantAttrs(t, root, map[string]string{"rpc.grpc.status_code": "0", "rpc.method": "Embed", "kvgate.request_id": "embed-1",
		"kvgate.usage.prompt_tokens": tokens, "kvgate.worker": resp.Worker})
	tok := ts.one(t, "kvgate.tokenize")
	wantChild(t, tok, root)
	wantAttrs(t, tok, map[string]string{"kvgate.prompt_tokens": tokens, "kvgate.tokenize.cache": "miss"})
	wantChild(t, ts.one(t, "kvgate.select"), root)
	leg := ts.one(t, "kvgate.dispatch regular")
	wantChild(t, leg, root)
	wantAttrs(t, leg, map[string]string{"kvgate.worker.url": resp.Worker, "rpc.grpc.status_code": "0"})

	want := "00-" + clientTraceID + "-" + leg.SpanID() + "-01"
	var got []string
	for _, e := range tf.engines {
		for _, tp := range e.traceparents() {
			if strings.Contains(tp, clientTraceID) {
				got = append(got, tp)
			}
		}
	}
	if len(got) != len(req.Inputs) || slices.ContainsFunc(got, func(tp string) bool { return tp != want }) {
		t.Fatalf("engines received Embed traceparents %q in the client's trace, want %d of %q", got, len(req.Inputs), want)
	}
}

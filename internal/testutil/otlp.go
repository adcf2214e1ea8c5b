package testutil

import (
	"context"
	"encoding/hex"
	"net"
	"strconv"
	"sync"
	"testing"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// OTLPReceiver is a real OTLP/gRPC trace collector on loopback: it accepts
// what an exporter sends and keeps it, so that tests assert on the spans
// that left the process, encoded and sent as in production.
type OTLPReceiver struct {
	collectorpb.UnimplementedTraceServiceServer
	addr string

	mu       sync.Mutex
	requests int
	spans    []Span
}

// Span is one received span with its resource's attributes.
type Span struct {
	*tracepb.Span
	Resource map[string]string
}

// TraceID and SpanID are the span's ids in hex, as traceparent writes them.
func (s Span) TraceID() string      { return hex.EncodeToString(s.Span.TraceId) }
func (s Span) SpanID() string       { return hex.EncodeToString(s.Span.SpanId) }
func (s Span) ParentSpanID() string { return hex.EncodeToString(s.Span.ParentSpanId) }

// Attr returns an attribute's value as a string ("" when absent), ints in
// decimal and bools as true/false.
func (s Span) Attr(key string) string { return attrString(s.Attributes, key) }

// HasEvent reports whether the span has an event of that name.
func (s Span) HasEvent(name string) bool {
	for _, e := range s.Events {
		if e.Name == name {
			return true
		}
	}
	return false
}

// StartOTLPReceiver serves a receiver on 127.0.0.1 until the test ends.
func StartOTLPReceiver(t testing.TB) *OTLPReceiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &OTLPReceiver{addr: lis.Addr().String()}
	g := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(g, r)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return r
}

// Addr is the receiver's host:port.
func (r *OTLPReceiver) Addr() string { return r.addr }

// Export implements the collector's TraceService.
func (r *OTLPReceiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	for _, rs := range req.GetResourceSpans() {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.Key] = attrString(rs.GetResource().GetAttributes(), kv.Key)
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.spans = append(r.spans, Span{Span: sp, Resource: res})
			}
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// Spans returns the spans received so far.
func (r *OTLPReceiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Requests is the number of Export calls received.
func (r *OTLPReceiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

func attrString(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key != key {
			continue
		}
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			return v.StringValue
		case *commonpb.AnyValue_IntValue:
			return strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			if v.BoolValue {
				return "true"
			}
			return "false"
		}
	}
	return ""
}

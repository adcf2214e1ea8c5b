package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/pipeline"
	"github.com/kvgate/kvgate/policy"
)

// router implements kvgate.v1.Router.
type router struct {
	kvgatev1.UnimplementedRouterServer
	s *Server
}

// Routing metadata keys; SMG's spellings are accepted too.
var (
	routingKeyHeaders   = []string{"x-routing-key", "x-smg-routing-key"}
	targetWorkerHeaders = []string{"x-target-worker", "x-smg-target-worker"}
	// implicitKeyHeaders identify a session when the client names none.
	implicitKeyHeaders = []string{"authorization", "x-forwarded-for", "cookie"}
	// requestIDHeaders name the request when its request_id field is empty,
	// as a proxy in front of kvgate or a client's tracing sets them.
	requestIDHeaders = []string{"x-request-id"}
)

func (r *router) Generate(req *kvgatev1.GenerateRequest, stream grpc.ServerStreamingServer[kvgatev1.GenerateResponse]) error {
	ctx := stream.Context()
	j, err := r.s.generateJob(ctx, req)
	if err != nil {
		nameRejected(ctx, req.GetRequestId())
		return err
	}
	traced(ctx, j)
	j.Send = func(c *kvgatev1.GenerateChunk, done *kvgatev1.GenerateComplete) error {
		resp := &kvgatev1.GenerateResponse{RequestId: j.ID}
		if done != nil {
			resp.Response = &kvgatev1.GenerateResponse_Complete{Complete: done}
		} else {
			resp.Response = &kvgatev1.GenerateResponse_Chunk{Chunk: c}
		}
		return stream.Send(resp)
	}
	return r.s.pipe.Run(ctx, j)
}

func (r *router) Chat(req *kvgatev1.ChatRequest, stream grpc.ServerStreamingServer[kvgatev1.ChatResponse]) error {
	ctx := stream.Context()
	j, err := r.s.chatJob(ctx, req)
	if err != nil {
		nameRejected(ctx, req.GetRequestId())
		return err
	}
	traced(ctx, j)
	j.Send = func(c *kvgatev1.GenerateChunk, done *kvgatev1.GenerateComplete) error {
		resp := &kvgatev1.ChatResponse{RequestId: j.ID}
		if done != nil {
			resp.Response = &kvgatev1.ChatResponse_Complete{Complete: done}
		} else {
			resp.Response = &kvgatev1.ChatResponse_Chunk{Chunk: c}
		}
		return stream.Send(resp)
	}
	return r.s.pipe.Run(ctx, j)
}

// traced attaches the request span of ctx to j and names the request
// on it and on the call's log line.
func traced(ctx context.Context, j *pipeline.Job) {
	labelOf(ctx).set(j.ID)
	j.Span = trace.SpanFromContext(ctx)
	if j.Span.IsRecording() {
		j.Span.SetAttributes(attrRequestID.String(j.ID))
	}
}

// nameRejected names a request refused before the pipeline (a validation
// error) for the call's log line, which the logging interceptor writes once
// with the status, so a rejection is logged exactly once.
func nameRejected(ctx context.Context, given string) {
	if given != "" {
		labelOf(ctx).set(truncateID(given))
	}
}

// truncateID bounds a client id quoted in a log line: an oversized one is
// the reason for the rejection and would otherwise be logged whole.
func truncateID(id string) string {
	if len(id) > maxRequestIDBytes {
		return strings.ToValidUTF8(id[:maxRequestIDBytes], "") + "..."
	}
	return id
}

// newJob starts a job named requestID, or, when that is empty, after the
// call's x-request-id metadata (see headerRequestID), or else a random id.
func newJob(ctx context.Context, requestID string, sp *kvgatev1.SamplingParams, stream bool) (*pipeline.Job, error) {
	if len(requestID) > maxRequestIDBytes {
		return nil, fault.Invalidf("request_id", "request_id is %d bytes; the limit is %d", len(requestID), maxRequestIDBytes)
	}
	if requestID == "" {
		var err error
		if requestID, err = headerRequestID(ctx); err != nil {
			return nil, err
		}
	}
	if requestID == "" {
		requestID = newRequestID()
	}
	if sp == nil {
		// Every field of the message is optional: no parameters at all means
		// the engine's defaults, exactly as an empty message does.
		sp = &kvgatev1.SamplingParams{}
	}
	if err := validateSampling(sp); err != nil {
		return nil, err
	}
	priority, err := priorityOf(ctx)
	if err != nil {
		return nil, err
	}
	return &pipeline.Job{ID: requestID, Sampling: sp, Stream: stream, Start: time.Now(), Routing: routing(ctx, nil, requestID),
		Priority: priority}, nil
}

// headerRequestID is the call's x-request-id metadata, which names a
// request whose request_id is empty ("" when there is none). Like
// request_id, it is a label: the id sent to an engine is still unique per
// attempt.
func headerRequestID(ctx context.Context) (string, error) {
	v := incomingHeader(ctx, requestIDHeaders)
	switch {
	case len(v) > maxRequestIDBytes:
		return "", fault.Invalidf("x-request-id", "x-request-id metadata is %d bytes; the limit is %d", len(v), maxRequestIDBytes)
	case !utf8.ValidString(v):
		return "", fault.Invalidf("x-request-id", "x-request-id metadata is not valid UTF-8")
	}
	return v, nil
}

// routing is the routing metadata of a request named id, as a policy sees
// it: md's when set (Explain passes the metadata of the request it
// explains), else the call's own.
func routing(ctx context.Context, md metadata.MD, id string) *policy.Request {
	r := &policy.Request{RequestID: id}
	if md != nil {
		r.RoutingKey = firstHeader(md, routingKeyHeaders)
		r.TargetWorker = firstHeader(md, targetWorkerHeaders)
		r.ImplicitKey = firstHeader(md, implicitKeyHeaders)
		return r
	}
	r.RoutingKey = incomingHeader(ctx, routingKeyHeaders)
	r.TargetWorker = incomingHeader(ctx, targetWorkerHeaders)
	r.ImplicitKey = incomingHeader(ctx, implicitKeyHeaders)
	return r
}

func firstHeader(md metadata.MD, keys []string) string {
	for _, k := range keys {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// incomingHeader is firstHeader of the call's incoming metadata, read in
// place: metadata.FromIncomingContext copies the whole map (every key and
// value slice) on each call, which the request path did five times per
// request. keys must be lower case, as gRPC stores them.
func incomingHeader(ctx context.Context, keys []string) string {
	for _, k := range keys {
		if v := metadata.ValueFromIncomingContext(ctx, k); len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// newRequestID returns a random id for requests that came without one.
func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "kvg-" + hex.EncodeToString(b[:])
}

// errShuttingDown is the cause of requests cut at the end of the shutdown
// drain period (the pipeline's, which admission refuses with too).
var errShuttingDown = pipeline.ErrShuttingDown

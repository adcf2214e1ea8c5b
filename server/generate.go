package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kvgate/kvgate/answer"
	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
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
	j.traced(ctx)
	j.send = func(c *kvgatev1.GenerateChunk, done *kvgatev1.GenerateComplete) error {
		resp := &kvgatev1.GenerateResponse{RequestId: j.id}
		if done != nil {
			resp.Response = &kvgatev1.GenerateResponse_Complete{Complete: done}
		} else {
			resp.Response = &kvgatev1.GenerateResponse_Chunk{Chunk: c}
		}
		return stream.Send(resp)
	}
	return r.s.run(ctx, j)
}

func (r *router) Chat(req *kvgatev1.ChatRequest, stream grpc.ServerStreamingServer[kvgatev1.ChatResponse]) error {
	ctx := stream.Context()
	j, err := r.s.chatJob(ctx, req)
	if err != nil {
		nameRejected(ctx, req.GetRequestId())
		return err
	}
	j.traced(ctx)
	j.send = func(c *kvgatev1.GenerateChunk, done *kvgatev1.GenerateComplete) error {
		resp := &kvgatev1.ChatResponse{RequestId: j.id}
		if done != nil {
			resp.Response = &kvgatev1.ChatResponse_Complete{Complete: done}
		} else {
			resp.Response = &kvgatev1.ChatResponse_Chunk{Chunk: c}
		}
		return stream.Send(resp)
	}
	return r.s.run(ctx, j)
}

// job is one generation, however the client asked for it: token ids, text
// or a conversation all become a prompt of ids and a way to send replies.
type job struct {
	id string
	// route is the model the request runs on.
	route    *route
	inputIDs []uint32
	sampling *kvgatev1.SamplingParams
	stream   bool
	start    time.Time
	send     func(chunk *kvgatev1.GenerateChunk, done *kvgatev1.GenerateComplete) error
	// metadata, when set, stands in for the call's own (Explain passes the
	// metadata of the request it explains).
	metadata metadata.MD
	// excluded are the workers earlier attempts failed on.
	excluded []string
	// full are the engines at their running-request limit when the
	// attempt was bound (late binding): it is placed elsewhere.
	full []string
	// commit, when set, caches the prompt's tokenization; called once the
	// request has passed validation against the workers, so that invalid
	// prompts never occupy the tokenizer caches.
	commit func()
	// span is the request's span (nil when untraced, as for Explain).
	span trace.Span
	// task is what the job's attempts do on their workers: generate, or
	// embed.
	task task
	// answer reads a Chat's output into its answer (reasoning, tool
	// calls) and may constrain it (response_format, tool_choice); nil: the
	// output is raw text.
	answer *answer.Shaper
	// model names the request's model in metrics (set by the pipeline).
	model string
	// routing is the request's routing metadata, as the policy sees it,
	// read by the first policyRequest (nil until then).
	routing *policy.Request
	// needs, when set, is the optional engine RPC the job's attempts call
	// (Embed): only workers that have not shown they lack it are placed.
	needs workers.RPC
}

// traced attaches the request span of ctx to the job and names the request
// on it and on the call's log line.
func (j *job) traced(ctx context.Context) {
	labelOf(ctx).set(j.id)
	j.span = trace.SpanFromContext(ctx)
	if j.span.IsRecording() {
		j.span.SetAttributes(attrRequestID.String(j.id))
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
func newJob(ctx context.Context, requestID string, sp *kvgatev1.SamplingParams, stream bool) (*job, error) {
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
	return &job{id: requestID, sampling: sp, stream: stream, start: time.Now()}, nil
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

// policyRequest is what the policy sees of an attempt of the job. The
// routing metadata is read once per job (the first attempt's call), not per
// attempt; each attempt gets a Request of its own, since the policies may
// keep it until the attempt ends and Exclude grows between attempts.
func (j *job) policyRequest(ctx context.Context, dryRun bool) *policy.Request {
	if j.routing == nil {
		j.routing = &policy.Request{RequestID: j.id, InputIDs: j.inputIDs}
		if j.metadata != nil {
			j.routing.RoutingKey = firstHeader(j.metadata, routingKeyHeaders)
			j.routing.TargetWorker = firstHeader(j.metadata, targetWorkerHeaders)
			j.routing.ImplicitKey = firstHeader(j.metadata, implicitKeyHeaders)
		} else {
			j.routing.RoutingKey = incomingHeader(ctx, routingKeyHeaders)
			j.routing.TargetWorker = incomingHeader(ctx, targetWorkerHeaders)
			j.routing.ImplicitKey = incomingHeader(ctx, implicitKeyHeaders)
		}
	}
	r := *j.routing
	r.InputIDs, r.DryRun, r.Exclude = j.inputIDs, dryRun, j.excluded
	if len(j.full) > 0 {
		r.Exclude = append(slices.Clip(j.excluded), j.full...)
	}
	return &r
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

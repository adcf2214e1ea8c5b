package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// router implements kvgate.v1.Router.
type router struct {
	kvgatev1.UnimplementedRouterServer
	s *Server
}

// Routing metadata keys; SMG's spellings are accepted too.
var routingKeyHeaders = []string{"x-routing-key", "x-smg-routing-key"}

func (r *router) Generate(req *kvgatev1.GenerateRequest, stream grpc.ServerStreamingServer[kvgatev1.GenerateResponse]) error {
	return r.s.generate(stream.Context(), req, stream)
}

// generate is the request pipeline: validate, select, dispatch, relay.
func (s *Server) generate(ctx context.Context, req *kvgatev1.GenerateRequest, out grpc.ServerStreamingServer[kvgatev1.GenerateResponse]) error {
	start := time.Now()
	if err := validateShape(req); err != nil {
		return err
	}
	id := req.GetRequestId()
	if id == "" {
		id = newRequestID()
	}

	candidates := s.candidates()
	if len(candidates) == 0 {
		return status.Errorf(codes.Unavailable, "no healthy worker: %d registered, none healthy", len(s.reg.Snapshot()))
	}
	if err := validateAgainst(req, limitsOf(candidates)); err != nil {
		return err
	}

	dec, err := s.policy.Select(ctx, &policy.Request{
		RequestID:  id,
		InputIDs:   req.GetInputIds(),
		RoutingKey: firstHeader(ctx, routingKeyHeaders),
	}, candidates)
	if errors.Is(err, policy.ErrNoHealthyWorker) {
		return status.Errorf(codes.Unavailable, "no healthy worker: %d registered, none healthy", len(s.reg.Snapshot()))
	}
	if err != nil {
		return status.Errorf(codes.Internal, "policy %s: %v", s.policy.Name(), err)
	}
	w := dec.Worker
	release := w.Acquire()
	defer release()
	s.metrics.selections.WithLabelValues(w.URL(), s.policy.Name()).Inc()
	log := s.log.With("request_id", id, "worker", w.URL(), "policy", s.policy.Name(), "reason", dec.Reason)

	es, err := w.Backend().Generate(ctx, &workers.GenerateRequest{
		RequestID: id,
		InputIDs:  req.GetInputIds(),
		Sampling:  toSampling(req.GetSamplingParams()),
	})
	if err != nil {
		return s.workerFailed(ctx, log, w, id, err, 0, false)
	}
	rel := relay{s: s, out: out, id: id, stream: req.GetStream(), start: start}
	done, err := rel.run(es)
	if err != nil {
		return s.workerFailed(ctx, log, w, id, err, len(rel.output), true)
	}
	done.Worker = w.URL()
	if err := out.Send(&kvgatev1.GenerateResponse{RequestId: id, Response: &kvgatev1.GenerateResponse_Complete{Complete: done}}); err != nil {
		return err
	}
	log.InfoContext(ctx, "generate done",
		"prompt_tokens", done.Usage.PromptTokens,
		"cached_tokens", done.Usage.CachedTokens,
		"completion_tokens", done.Usage.CompletionTokens,
		"finish_reason", done.FinishReason.String(),
		"duration", time.Since(start))
	return nil
}

// candidates are the workers that may take a whole request now.
func (s *Server) candidates() []*workers.Worker {
	all := s.reg.Snapshot()
	out := all[:0]
	for _, w := range all {
		if w.Healthy() && w.Role() == workers.RoleRegular {
			out = append(out, w)
		}
	}
	return out
}

// relay copies one worker stream to the client.
type relay struct {
	s      *Server
	out    grpc.ServerStreamingServer[kvgatev1.GenerateResponse]
	id     string
	stream bool
	start  time.Time
	output []uint32
}

// run forwards chunks until the worker's completion, which it returns
// translated (worker not yet filled in). Any error means the request did not
// complete: a stream that ends without a completion is an error, never a
// half-empty success.
func (r *relay) run(es workers.Stream) (*kvgatev1.GenerateComplete, error) {
	for {
		c, err := es.Recv()
		if errors.Is(err, io.EOF) {
			return nil, status.Error(codes.Unavailable, "worker ended the stream without a completion")
		}
		if err != nil {
			return nil, err
		}
		if c.Final != nil {
			return r.complete(c.Final)
		}
		if err := r.send(c.TokenIDs); err != nil {
			return nil, err
		}
	}
}

func (r *relay) send(ids []uint32) error {
	if len(ids) == 0 {
		return nil
	}
	if len(r.output) == 0 {
		r.s.metrics.ttft.Observe(time.Since(r.start).Seconds())
	}
	index := len(r.output)
	r.output = append(r.output, ids...)
	if !r.stream {
		return nil
	}
	return r.out.Send(&kvgatev1.GenerateResponse{
		RequestId: r.id,
		Response:  &kvgatev1.GenerateResponse_Chunk{Chunk: &kvgatev1.GenerateChunk{TokenIds: ids, Index: uint32(index)}},
	})
}

// complete turns the worker's completion into ours. Engines list every output
// token in the completion; tokens there that never arrived as chunks are sent
// as a last chunk, so a streaming client always receives the whole output.
func (r *relay) complete(f *workers.Completion) (*kvgatev1.GenerateComplete, error) {
	if n := len(r.output); len(f.OutputIDs) > n {
		if err := r.send(f.OutputIDs[n:]); err != nil {
			return nil, err
		}
	}
	return &kvgatev1.GenerateComplete{
		OutputIds:          r.output,
		FinishReason:       finishReason(f.FinishReason),
		MatchedStopTokenId: f.MatchedStopTokenID,
		Usage: &kvgatev1.Usage{
			PromptTokens:     f.PromptTokens,
			CompletionTokens: f.CompletionTokens,
			CachedTokens:     f.CachedTokens,
		},
	}, nil
}

func finishReason(s string) kvgatev1.FinishReason {
	switch s {
	case "stop":
		return kvgatev1.FinishReason_FINISH_REASON_STOP
	case "length":
		return kvgatev1.FinishReason_FINISH_REASON_LENGTH
	case "abort":
		return kvgatev1.FinishReason_FINISH_REASON_ABORT
	}
	return kvgatev1.FinishReason_FINISH_REASON_UNSPECIFIED
}

// workerFailed decides what the client sees when a request did not complete,
// and tells the worker to drop the request if it may still hold it.
func (s *Server) workerFailed(ctx context.Context, log *slog.Logger, w *workers.Worker, id string, err error, tokens int, started bool) error {
	if ctx.Err() != nil {
		// The client cancelled or its deadline passed: the worker may still be
		// generating, so abort it there.
		s.abort(ctx, log, w, id)
		log.InfoContext(ctx, "generate ended by client", "reason", ctx.Err(), "tokens_sent", tokens)
		return status.FromContextError(ctx.Err()).Err()
	}
	if started {
		s.abort(ctx, log, w, id)
	}
	log.WarnContext(ctx, "worker failed", "error", err, "tokens_sent", tokens)
	switch code := status.Code(err); code {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.ResourceExhausted, codes.DeadlineExceeded:
		return status.Errorf(code, "worker %s: %s", w.URL(), status.Convert(err).Message())
	}
	if tokens == 0 {
		return status.Errorf(codes.Unavailable, "worker %s failed before the first token: %s", w.URL(), status.Convert(err).Message())
	}
	return status.Errorf(codes.Unavailable, "worker %s failed after %d tokens: %s", w.URL(), tokens, status.Convert(err).Message())
}

// abort asks the worker to drop the request, on a context of its own since the
// request's context is usually the reason for aborting.
func (s *Server) abort(ctx context.Context, log *slog.Logger, w *workers.Worker, id string) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.abortTimeout)
	defer cancel()
	s.metrics.aborts.WithLabelValues(w.URL()).Inc()
	if err := w.Backend().Abort(actx, id); err != nil {
		log.WarnContext(ctx, "abort failed", "error", err)
	}
}

func firstHeader(ctx context.Context, keys []string) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, k := range keys {
		if v := md.Get(k); len(v) > 0 {
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

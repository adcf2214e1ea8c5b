package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/tokenize/detok"
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
)

func (r *router) Generate(req *kvgatev1.GenerateRequest, stream grpc.ServerStreamingServer[kvgatev1.GenerateResponse]) error {
	if field, bad := undecodable(req); bad {
		return invalid("%s is not valid UTF-8", field)
	}
	j, err := r.s.generateJob(req)
	if err != nil {
		return err
	}
	j.send = func(c *kvgatev1.GenerateChunk, done *kvgatev1.GenerateComplete) error {
		resp := &kvgatev1.GenerateResponse{RequestId: j.id}
		if done != nil {
			resp.Response = &kvgatev1.GenerateResponse_Complete{Complete: done}
		} else {
			resp.Response = &kvgatev1.GenerateResponse_Chunk{Chunk: c}
		}
		return stream.Send(resp)
	}
	return r.s.run(stream.Context(), j)
}

func (r *router) Chat(req *kvgatev1.ChatRequest, stream grpc.ServerStreamingServer[kvgatev1.ChatResponse]) error {
	if field, bad := undecodable(req); bad {
		return invalid("%s is not valid UTF-8", field)
	}
	j, err := r.s.chatJob(req)
	if err != nil {
		return err
	}
	j.send = func(c *kvgatev1.GenerateChunk, done *kvgatev1.GenerateComplete) error {
		resp := &kvgatev1.ChatResponse{RequestId: j.id}
		if done != nil {
			resp.Response = &kvgatev1.ChatResponse_Complete{Complete: done}
		} else {
			resp.Response = &kvgatev1.ChatResponse_Chunk{Chunk: c}
		}
		return stream.Send(resp)
	}
	return r.s.run(stream.Context(), j)
}

// job is one generation, however the client asked for it: token ids, text
// or a conversation all become a prompt of ids and a way to send replies.
type job struct {
	id       string
	inputIDs []uint32
	sampling *kvgatev1.SamplingParams
	stream   bool
	start    time.Time
	send     func(chunk *kvgatev1.GenerateChunk, done *kvgatev1.GenerateComplete) error
	// metadata, when set, stands in for the call's own (Explain passes the
	// metadata of the request it explains).
	metadata metadata.MD
}

func newJob(requestID string, sp *kvgatev1.SamplingParams, stream bool) (*job, error) {
	if len(requestID) > maxRequestIDBytes {
		return nil, invalid("request_id is %d bytes; the limit is %d", len(requestID), maxRequestIDBytes)
	}
	if requestID == "" {
		requestID = newRequestID()
	}
	if err := validateSampling(sp); err != nil {
		return nil, err
	}
	return &job{id: requestID, sampling: sp, stream: stream, start: time.Now()}, nil
}

// run is the request pipeline after the prompt is known: check it against the
// workers, select, dispatch, relay.
func (s *Server) run(ctx context.Context, j *job) error {
	if s.pd != nil {
		return s.runPD(ctx, j)
	}
	dec, err := s.decide(ctx, j, false)
	if err != nil {
		return err
	}
	w := dec.Worker
	release := w.Acquire()
	defer release()
	s.metrics.selections.WithLabelValues(w.URL(), s.policy.Name()).Inc()
	log := s.log.With("request_id", j.id, "worker", w.URL(), "policy", s.policy.Name(), "branch", dec.Branch, "reason", dec.Reason)

	// The worker's stream lives on a context of its own, so a generation the
	// router stops (a stop string) can be released without ending ctx.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	es, err := w.Backend().Generate(wctx, &workers.GenerateRequest{
		RequestID: j.id,
		InputIDs:  j.inputIDs,
		Sampling:  toSampling(j.sampling),
	})
	if err != nil {
		s.observe(ctx, j, dec, policy.Outcome{Err: err})
		return s.workerFailed(ctx, log, w, j.id, err, 0, false)
	}
	rel := s.newRelay(j)
	done, err := rel.run(es)
	if err != nil {
		s.observe(ctx, j, dec, policy.Outcome{CachedTokens: int(rel.last.CachedTokens), Err: err})
		return s.workerFailed(ctx, log, w, j.id, err, len(rel.output), true)
	}
	out := policy.Outcome{CachedTokens: int(done.Usage.GetCachedTokens()), OutputIDs: done.OutputIds}
	if rel.stopped {
		out.OutputIDs = nil // aborted on the engine, which keeps no output of it
	}
	s.observe(ctx, j, dec, out)
	if rel.stopped {
		// The engine is still generating past the stop string.
		cancel()
		s.abort(ctx, log, w, j.id)
	}
	done.Worker = w.URL()
	return finish(ctx, log, j, done)
}

// finish sends the completion and logs the request's outcome.
func finish(ctx context.Context, log *slog.Logger, j *job, done *kvgatev1.GenerateComplete) error {
	if err := j.send(nil, done); err != nil {
		return err
	}
	log.InfoContext(ctx, "generate done",
		"prompt_tokens", done.Usage.PromptTokens,
		"cached_tokens", done.Usage.CachedTokens,
		"completion_tokens", done.Usage.CompletionTokens,
		"finish_reason", done.FinishReason.String(),
		"duration", time.Since(j.start))
	return nil
}

// decide checks the prompt against the workers and asks the policy. With
// dryRun (Explain) the policy changes no state.
func (s *Server) decide(ctx context.Context, j *job, dryRun bool) (policy.Decision, error) {
	if len(j.sampling.GetStop()) > 0 && s.text == nil {
		return policy.Decision{}, status.Error(codes.FailedPrecondition, noTokenizer("sampling_params.stop"))
	}
	candidates := s.candidates()
	if !slices.ContainsFunc(candidates, (*workers.Worker).Healthy) {
		return policy.Decision{}, status.Errorf(codes.Unavailable, "no healthy worker: %d registered, none healthy", len(s.reg.Snapshot()))
	}
	if err := validateAgainst(j.inputIDs, j.sampling, limitsOf(candidates)); err != nil {
		return policy.Decision{}, err
	}
	dec, err := s.policy.Select(ctx, j.policyRequest(ctx, dryRun), candidates)
	switch {
	case errors.Is(err, policy.ErrNoHealthyWorker):
		return dec, status.Errorf(codes.Unavailable, "no healthy worker: %d registered, none healthy", len(s.reg.Snapshot()))
	case errors.Is(err, policy.ErrTargetUnavailable):
		return dec, status.Errorf(codes.Unavailable, "%v", err)
	case err != nil:
		return dec, status.Errorf(codes.Internal, "policy %s: %v", s.policy.Name(), err)
	}
	if !dryRun {
		s.metrics.decisions.WithLabelValues(s.policy.Name(), dec.Branch).Inc()
	}
	return dec, nil
}

// policyRequest is what the policy sees of a job and its metadata.
func (j *job) policyRequest(ctx context.Context, dryRun bool) *policy.Request {
	md, _ := metadata.FromIncomingContext(ctx)
	if j.metadata != nil {
		md = j.metadata
	}
	return &policy.Request{
		RequestID:    j.id,
		InputIDs:     j.inputIDs,
		RoutingKey:   firstHeader(md, routingKeyHeaders),
		TargetWorker: firstHeader(md, targetWorkerHeaders),
		ImplicitKey:  firstHeader(md, implicitKeyHeaders),
		DryRun:       dryRun,
	}
}

// candidates are the workers that serve whole requests, healthy or not, in
// registration order: policies skip unhealthy ones themselves, and keep their
// own indices (x-target-worker) and hash rings stable while health flaps.
func (s *Server) candidates() []*workers.Worker { return s.reg.WithRole(workers.RoleRegular) }

// relay copies one worker stream to the client, detokenizing it when the
// router has a tokenizer.
type relay struct {
	s       *Server
	j       *job
	ds      *detok.Stream // nil: no tokenizer, ids only
	output  []uint32
	text    strings.Builder
	last    workers.Chunk // the engine's latest running totals
	stopped bool          // a stop string matched here, not in the engine
	firstAt time.Time     // when the first token arrived
}

func (s *Server) newRelay(j *job) *relay {
	r := &relay{s: s, j: j}
	if s.text != nil {
		sp := j.sampling
		r.ds = s.text.NewStream(detok.Options{
			SkipSpecialTokens: sp.SkipSpecialTokens == nil || *sp.SkipSpecialTokens,
			StopStrings:       sp.GetStop(),
			NoStopTrim:        sp.GetNoStopTrim(),
			PromptIDs:         j.inputIDs,
		})
	}
	return r
}

// run forwards chunks until the worker's completion, or until a stop string
// matches, and returns the completion (worker not yet filled in). Any error
// means the request did not complete: a stream that ends without a
// completion is an error, never a half-empty success.
func (r *relay) run(es workers.Stream) (*kvgatev1.GenerateComplete, error) {
	for {
		c, err := es.Recv()
		if errors.Is(err, io.EOF) {
			return nil, status.Error(codes.Unavailable, "worker ended the stream without a completion")
		}
		if err != nil {
			return nil, err
		}
		r.last = c
		if c.Final != nil {
			return r.complete(c.Final)
		}
		if err := r.send(c.TokenIDs); err != nil {
			return nil, err
		}
		if r.stopped {
			return r.completion("", nil, c.PromptTokens, c.CachedTokens), nil
		}
	}
}

func (r *relay) send(ids []uint32) error {
	if len(ids) == 0 || r.stopped {
		return nil
	}
	if len(r.output) == 0 {
		r.firstAt = time.Now()
		r.s.metrics.ttft.Observe(r.firstAt.Sub(r.j.start).Seconds())
	}
	index := len(r.output)
	r.output = append(r.output, ids...)
	delta := ""
	if r.ds != nil {
		d, stopped, err := r.ds.Push(ids)
		if err != nil {
			return status.Errorf(codes.Internal, "detokenizing the worker's output: %v", err)
		}
		delta, r.stopped = d, stopped
		r.text.WriteString(delta)
	}
	if !r.j.stream {
		return nil
	}
	return r.j.send(&kvgatev1.GenerateChunk{TokenIds: ids, Index: uint32(index), Text: delta}, nil)
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
	if r.stopped {
		return r.completion("", nil, f.PromptTokens, f.CachedTokens), nil
	}
	if r.ds != nil {
		if tail := r.ds.Finish(); tail != "" {
			r.text.WriteString(tail)
			if r.j.stream {
				if err := r.j.send(&kvgatev1.GenerateChunk{Index: uint32(len(r.output)), Text: tail}, nil); err != nil {
					return nil, err
				}
			}
		}
	}
	c := r.completion(f.FinishReason, f.MatchedStopTokenID, f.PromptTokens, f.CachedTokens)
	c.Usage.CompletionTokens = f.CompletionTokens
	return c, nil
}

// completion assembles the final message; finish "" means a stop string
// matched in the router.
func (r *relay) completion(finish string, stopToken *uint32, prompt, cached uint32) *kvgatev1.GenerateComplete {
	c := &kvgatev1.GenerateComplete{
		OutputIds:          r.output,
		FinishReason:       finishReason(finish),
		MatchedStopTokenId: stopToken,
		Text:               r.text.String(),
		Usage: &kvgatev1.Usage{
			PromptTokens:     prompt,
			CompletionTokens: uint32(len(r.output)),
			CachedTokens:     cached,
		},
	}
	if r.stopped {
		c.FinishReason = kvgatev1.FinishReason_FINISH_REASON_STOP
		if str, _ := r.ds.Matched(); str != "" {
			c.MatchedStopString = &str
		}
	}
	return c
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

func firstHeader(md metadata.MD, keys []string) string {
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

// observe reports the outcome to a policy that learns from it and records how
// well a cache-aware prediction matched what the engine found.
func (s *Server) observe(ctx context.Context, j *job, d policy.Decision, out policy.Outcome) {
	if o, ok := s.policy.(policy.Observer); ok {
		o.Observe(j.policyRequest(ctx, false), d, out)
	}
	if out.Err == nil && d.Matched != nil {
		s.metrics.observePrediction(d.PredictedCachedTokens, out.CachedTokens)
	}
}

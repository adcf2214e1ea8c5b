package server

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// decidePD checks the prompt against both sides and asks the dispatcher for
// a prefill/decode pair. A real (not dry-run) decision holds a bootstrap
// room; the caller dispatches it or releases it.
func (s *Server) decidePD(ctx context.Context, j *job, dryRun bool) (pd.Decision, *policy.Request, error) {
	if len(j.sampling.GetStop()) > 0 && s.text == nil {
		return pd.Decision{}, nil, status.Error(codes.FailedPrecondition, noTokenizer("sampling_params.stop"))
	}
	prefills, decodes := s.reg.WithRole(workers.RolePrefill), s.reg.WithRole(workers.RoleDecode)
	for _, side := range []struct {
		name string
		ws   []*workers.Worker
	}{{"prefill", prefills}, {"decode", decodes}} {
		if !slices.ContainsFunc(side.ws, (*workers.Worker).Healthy) {
			return pd.Decision{}, nil, status.Errorf(codes.Unavailable, "no healthy %s worker: %d registered, none healthy", side.name, len(side.ws))
		}
	}
	if err := validateAgainst(j.inputIDs, j.sampling, limitsOf(append(slices.Clone(prefills), decodes...))); err != nil {
		return pd.Decision{}, nil, err
	}
	preq := j.policyRequest(ctx, dryRun)
	dec, err := s.pd.Select(ctx, preq, prefills, decodes)
	switch {
	case errors.Is(err, policy.ErrNoHealthyWorker):
		return dec, nil, status.Errorf(codes.Unavailable, "%v", err)
	case errors.Is(err, policy.ErrTargetUnavailable):
		return dec, nil, status.Errorf(codes.Unavailable, "%v", err)
	case err != nil:
		return dec, nil, status.Errorf(codes.Internal, "pd selection: %v", err)
	}
	return dec, preq, nil
}

// runPD serves a job with prefill/decode disaggregation: the dispatcher runs
// both legs (and owns their load counting, aborts and policy observations);
// the client sees the decode leg's stream.
func (s *Server) runPD(ctx context.Context, j *job) error {
	dec, preq, err := s.decidePD(ctx, j, false)
	if err != nil {
		return err
	}
	s.metrics.decisions.WithLabelValues("pd_prefill:"+s.pdPrefillName, dec.Prefill.Branch).Inc()
	p, d := dec.Prefill.Worker, dec.Decode.Worker
	log := s.log.With("request_id", j.id, "prefill", p.URL(), "decode", d.URL(), "room", dec.Room,
		"prefill_branch", dec.Prefill.Branch, "reason", dec.Prefill.Reason)

	// The legs live on a context the router ends when it is done with them
	// (completion, a stop string, or the client going away).
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ps, err := s.pd.Dispatch(wctx, dec, preq, &workers.GenerateRequest{
		RequestID: j.id,
		InputIDs:  j.inputIDs,
		Sampling:  toSampling(j.sampling),
	})
	if err != nil {
		dec.Release()
		return s.pdFailed(ctx, log, err, 0)
	}
	var prefillEnd atomic.Int64 // unix nanos when the prefill leg ended
	go func() {
		select {
		case <-ps.PrefillDone():
			prefillEnd.Store(time.Now().UnixNano())
			if r := ps.Prefill(); r.Err == nil {
				s.metrics.pdPrefill.Observe(r.Duration.Seconds())
			}
		case <-ps.Done():
		}
	}()
	rel := s.newRelay(j)
	done, err := rel.run(ps)
	if err != nil {
		return s.pdFailed(ctx, log, err, len(rel.output))
	}
	if rel.stopped {
		cancel() // the dispatcher aborts both legs
	}
	if end := prefillEnd.Load(); end > 0 && !rel.firstAt.IsZero() {
		if handoff := rel.firstAt.Sub(time.Unix(0, end)); handoff > 0 {
			s.metrics.pdHandoff.Observe(handoff.Seconds())
		}
	}
	if !rel.firstAt.IsZero() {
		s.metrics.pdTTFT.Observe(rel.firstAt.Sub(j.start).Seconds())
	}
	done.Worker = d.URL()
	done.PrefillWorker = p.URL()
	return finish(ctx, log, j, done)
}

// pdFailed maps a two-legged failure to what the client sees, naming the leg.
func (s *Server) pdFailed(ctx context.Context, log *slog.Logger, err error, tokens int) error {
	var leg *workers.LegError
	if errors.As(err, &leg) {
		s.metrics.pdFailures.WithLabelValues(leg.Leg).Inc()
	}
	if ctx.Err() != nil {
		log.InfoContext(ctx, "generate ended by client", "reason", ctx.Err(), "tokens_sent", tokens)
		return status.FromContextError(ctx.Err()).Err()
	}
	log.WarnContext(ctx, "pd request failed", "error", err, "tokens_sent", tokens)
	code := status.Code(err)
	switch code {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.ResourceExhausted, codes.DeadlineExceeded:
	default:
		code = codes.Unavailable
	}
	if tokens > 0 {
		return status.Errorf(code, "%s (after %d tokens)", status.Convert(err).Message(), tokens)
	}
	return status.Errorf(code, "%s", status.Convert(err).Message())
}

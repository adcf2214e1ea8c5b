package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/workers"
)

// cause says whose fault an attempt's failure is, which decides everything
// that follows: the status the client sees, whether the worker's breaker
// counts it, and whether another worker may try.
type cause int

const (
	// causeWorker: the engine failed (unreachable, an error status that is
	// not about the request, a stream cut short, a stall, garbage). It counts
	// against the worker and may be retried elsewhere before the first token.
	causeWorker cause = iota
	// causeClientError: the request itself is wrong (the engine answered
	// INVALID_ARGUMENT, FAILED_PRECONDITION or OUT_OF_RANGE); it would fail
	// anywhere.
	causeClientError
	// causeClientGone: the client cancelled or its deadline passed.
	causeClientGone
	// causeShutdown: kvgate's shutdown drain period ended.
	causeShutdown
	// causeRouter: a bug in kvgate (INTERNAL).
	causeRouter
	// causeRouterLimit: a limit of the router's own refused the engine's
	// answer (a message beyond the engine connections' receive limit). The
	// engine did nothing wrong, and any other would answer as large.
	causeRouterLimit
	// causeUnsupported: the engine does not implement the call
	// (UNIMPLEMENTED, or an Embed answered with an unusable vector). It
	// says nothing about the engine's health, so it never counts against
	// the breaker that Generate depends on.
	causeUnsupported
)

// failure is an attempt that did not complete, classified once.
type failure struct {
	err    error
	cause  cause
	worker *workers.Worker // the worker blamed; nil before placement
	tokens int             // tokens received from the engine before it
	// delivered: the client has received some of the output (a streaming
	// call's chunk). Until then another worker may serve the request as if
	// nothing happened, even when this engine had generated tokens: a
	// non-streaming call gets nothing before its completion.
	delivered bool
	// placement is set when no attempt could be placed at all.
	placement bool
}

// errRouterBug wraps errors that are kvgate's own fault.
type errRouterBug struct{ err error }

func (e errRouterBug) Error() string { return e.err.Error() }
func (e errRouterBug) Unwrap() error { return e.err }

// timeout causes an attempt's context is cancelled with.
var (
	errFirstTokenTimeout = errors.New("no first token within --first-token-timeout")
	errStreamIdle        = errors.New("no token within --stream-idle-timeout")
)

// classify decides what an attempt's error means. ctx is the request's,
// actx the attempt's (cancelled with a cause by the pipeline's timers).
func (s *Pipeline) classify(ctx, actx context.Context, p *Plan, err error, tokens int) *failure {
	f := &failure{err: err, tokens: tokens, worker: p.blame(err)}
	var bug errRouterBug
	ended := contextEnded(ctx)
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, ErrShuttingDown):
		f.cause = causeShutdown
	case ended != nil:
		f.cause = causeClientGone
		f.err = ended
	case errors.As(err, &bug):
		f.cause = causeRouter
	default:
		if c := context.Cause(actx); errors.Is(c, errFirstTokenTimeout) || errors.Is(c, errStreamIdle) {
			f.err = fault.Newf(fault.Unavailable, "%w", c)
			break
		}
		kind, isFault := fault.KindOf(err)
		switch {
		case workers.LocalLimit(err):
			f.cause = causeRouterLimit
		case workers.Unimplemented(err), errors.Is(err, workers.ErrBadEmbedding):
			f.cause = causeUnsupported
		case isFault:
			// A fault an adapter raised about the request (a constraint
			// no engine knows, a PD pairing the protocols cannot make)
			// would fail anywhere; the rest (a corrupt or unreachable
			// engine) is the worker's.
			switch kind {
			case fault.Invalid, fault.TooLarge, fault.Precondition, fault.NotFound:
				f.cause = causeClientError
			}
		default:
			switch status.Code(err) {
			case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
				f.cause = causeClientError
			}
		}
	}
	return f
}

// contextEnded is the error ctx ended with, nil while it runs: ctx's
// error, or context.DeadlineExceeded once ctx's deadline has passed though
// its timer has not fired yet. The deadline is passed on to the engine, and the
// engine's stream can end with it a moment before the router's own timer
// cancels ctx; that is still the client's deadline, not a failing worker.
func contextEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// retryable: the worker failed before the client saw any token, so another
// may serve the request as if nothing happened.
func (f *failure) retryable() bool { return f.cause == causeWorker && !f.delivered && f.worker != nil }

// status is the one place a failed request becomes what the client is
// told: a fault saying what happened, which the edge (statusOf) turns into
// the wire status. Client mistakes keep the engine's code; a bug of kvgate's
// is fault.Bug (INTERNAL); a failing worker is fault.Unavailable, which
// clients may retry.
func (f *failure) status() error {
	if f.placement {
		if _, ok := fault.As(f.err); ok || isStatus(f.err) {
			return f.err
		}
		return fault.Newf(fault.Unavailable, "%w", f.err)
	}
	msg := message(f.err)
	switch f.cause {
	case causeClientGone:
		return f.err // the context's error, which the edge answers as such
	case causeShutdown:
		return fault.Newf(fault.Unavailable, "%w; the request was cut after %d tokens", ErrShuttingDown, f.tokens)
	case causeRouter:
		return fault.Newf(fault.Bug, "%s", msg)
	case causeClientError:
		if _, ok := fault.As(f.err); ok {
			return fmt.Errorf("worker %s: %w", f.worker.URL(), f.err)
		}
		return &engineRefusal{worker: f.worker.URL(), err: f.err}
	case causeRouterLimit:
		return fault.Newf(fault.TooLarge, "worker %s answered more than kvgate accepts from an engine "+
			"(MaxEngineAnswerBytes; ask for fewer log-probabilities or tokens): %s", f.worker.URL(), msg)
	case causeUnsupported:
		return fault.Newf(fault.Unsupported, "worker %s does not implement this call: %s", f.worker.URL(), msg)
	}
	if f.tokens == 0 {
		return fault.Newf(fault.Unavailable, "worker %s failed before the first token: %s", f.worker.URL(), msg)
	}
	return fault.Newf(fault.Unavailable, "worker %s failed after %d tokens: %s", f.worker.URL(), f.tokens, msg)
}

// engineRefusal is an engine's own status refusing the request (INVALID_ARGUMENT,
// FAILED_PRECONDITION, OUT_OF_RANGE), relayed under the worker's name. It
// carries the engine's status rather than a fault because the client is
// owed the engine's code, OUT_OF_RANGE included, which no fault kind names:
// the edge passes a wrapped status through, and grpc-go answers with the
// wrapped code and this error's text as the message.
type engineRefusal struct {
	worker string
	err    error
}

func (e *engineRefusal) Error() string { return "worker " + e.worker + ": " + message(e.err) }
func (e *engineRefusal) Unwrap() error { return e.err }

// message is an error's text as a client reads it: a gRPC status's message
// without the "rpc error: code = ... desc =" framing, else the error's text.
func message(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
}

// isStatus reports whether err carries a gRPC status (an engine's, relayed).
func isStatus(err error) bool {
	_, ok := status.FromError(err)
	return ok
}

// log records the failure at the level it deserves: a client leaving is
// routine, a worker failing is a warning, a bug is an error.
func (f *failure) log(ctx context.Context, log *slog.Logger) {
	switch f.cause {
	case causeClientGone:
		log.InfoContext(ctx, "generate ended by client", "cause", f.err, "tokens_sent", f.tokens)
	case causeShutdown:
		log.WarnContext(ctx, "generate cut by shutdown", "tokens_sent", f.tokens)
	case causeRouter:
		log.ErrorContext(ctx, "generate failed in the router", "error", f.err, "tokens_sent", f.tokens)
	case causeClientError:
		log.InfoContext(ctx, "worker refused the request", "error", f.err)
	case causeRouterLimit:
		log.WarnContext(ctx, "worker's answer beyond the router's receive limit", "error", f.err)
	case causeUnsupported:
		log.InfoContext(ctx, "worker does not implement the call", "error", f.err)
	default:
		log.WarnContext(ctx, "worker failed", "error", f.err, "tokens_sent", f.tokens, "retryable", f.retryable())
	}
}

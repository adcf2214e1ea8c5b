package server

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// A plan is where one attempt runs and what the pipeline does at each of its
// steps. A dispatcher returns the same type for a whole request on one worker
// and for a prefill/decode pair: what differs between them is data (the
// legs) and the run behind them, so nothing downstream of place asks which
// kind of attempt it holds.
type plan struct {
	// legs are the engine calls of the attempt in the order they start;
	// the first is the one whose policy read the prompt (the regular or
	// the prefill worker), the last serves the client's tokens (the same
	// leg, or the decode one).
	legs []leg
	// room is the bootstrap room joining a disaggregated pair (0: none).
	room int32
	// slots are the circuit-breaker places the attempt holds.
	slots breakerSlots
	// selfAborting: the legs abort themselves when the attempt ends early
	// (the disaggregated abort rules), so the pipeline sends no Abort.
	selfAborting bool
	// run sends the attempt and keeps what it reserved until end.
	run run
}

// A run is the part of a plan that holds state while the attempt is in
// flight: how it is sent and what its first token, its end and a failed
// Abort change.
type run interface {
	// start sends the attempt; its stream ends when ctx does.
	start(ctx context.Context, req *workers.GenerateRequest) (workers.Stream, error)
	// firstToken is told when the first output token reached the relay.
	firstToken(at time.Time)
	// end releases what the attempt holds and reports the outcome to the
	// policies that learn from it. It is called once, whatever happened.
	end(out policy.Outcome)
	// aborted is told how the Abort the pipeline sent (after end) fared;
	// again sends it once more.
	aborted(err error, again func() error)
}

// leg is one engine call of an attempt.
type leg struct {
	role   string // "regular", "prefill" or "decode"
	w      *workers.Worker
	policy string          // the name of the policy that chose w
	dec    policy.Decision // its decision
	// span is the leg's client span, set by startLegs (nil before, and
	// when not tracing).
	span trace.Span
}

// served is the worker whose tokens the client sees.
func (p *plan) served() *workers.Worker { return p.legs[len(p.legs)-1].w }

// decision is the policy decision that placed the client-visible worker.
func (p *plan) decision() policy.Decision { return p.legs[len(p.legs)-1].dec }

// leg returns the attempt's leg of role, or nil.
func (p *plan) leg(role string) *leg {
	for i := range p.legs {
		if p.legs[i].role == role {
			return &p.legs[i]
		}
	}
	return nil
}

// blame returns the worker that caused a failure of this attempt: the leg a
// *pd.LegError names, else the served worker.
func (p *plan) blame(err error) *workers.Worker {
	var le *pd.LegError
	if errors.As(err, &le) {
		if l := p.leg(le.Leg); l != nil {
			return l.w
		}
	}
	return p.served()
}

// settle reports the attempt to the workers' circuit breakers: nil is a
// success; a failure counts against the worker it blames when it is the
// worker's fault, and is ignored otherwise. Called once.
func (p *plan) settle(f *failure) { p.slots.settle(f) }

// logAttrs describe the plan in log lines.
func (p *plan) logAttrs() []any {
	first := &p.legs[0]
	if len(p.legs) == 1 {
		return []any{"worker", first.w.URL(), "policy", first.policy, "branch", first.dec.Branch, "decision", why{&first.dec}}
	}
	attrs := make([]any, 0, 2*len(p.legs)+6)
	for _, l := range p.legs {
		attrs = append(attrs, l.role, l.w.URL())
	}
	return append(attrs, "room", p.room, first.role+"_branch", first.dec.Branch, "decision", why{&first.dec})
}

// traceAttrs describe the decisions on the selection span: the first leg's
// policy and prediction, the served worker, and the other legs beside them.
func (p *plan) traceAttrs() []attribute.KeyValue {
	first, last := &p.legs[0], &p.legs[len(p.legs)-1]
	attrs := []attribute.KeyValue{attrPolicy.String(first.policy), attrBranch.String(first.dec.Branch),
		attrPredictedCached.Int(first.dec.PredictedCachedTokens), attrWorker.String(last.w.URL())}
	if len(p.legs) == 1 {
		return attrs
	}
	for _, l := range p.legs[:len(p.legs)-1] {
		attrs = append(attrs, attribute.String("kvgate."+l.role+".worker", l.w.URL()))
	}
	return append(attrs, attribute.String("kvgate."+last.role+".policy", last.policy),
		attribute.String("kvgate."+last.role+".policy.branch", last.dec.Branch),
		attribute.Int64("kvgate.pd.room", int64(p.room)))
}

// reason says why each leg went where it did: the decision's own words for
// one leg, each leg's prefixed with its role for several.
func (p *plan) reason() string {
	if len(p.legs) == 1 {
		return p.legs[0].dec.Why()
	}
	var b strings.Builder
	for i := range p.legs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.legs[i].role + ": " + p.legs[i].dec.Why())
	}
	return b.String()
}

// why logs a decision's reason, which policies build only when asked
// (Decision.Why): a logger at a level that drops the line never asks. One
// pointer wide, it goes into the attributes without an allocation.
type why struct{ d *policy.Decision }

func (w why) LogValue() slog.Value { return slog.StringValue(w.d.Why()) }

package pipeline

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

// A Plan is where one attempt runs and what the pipeline does at each of its
// steps. A placer returns the same type for a whole request on one worker
// and for a prefill/decode pair: what differs between them is data (the
// legs) and the run behind them, so nothing downstream of place asks which
// kind of attempt it holds.
type Plan struct {
	// Legs are the engine calls of the attempt in the order they start;
	// the first is the one whose policy read the prompt (the regular or
	// the prefill worker), the last serves the client's tokens (the same
	// leg, or the decode one).
	Legs []Leg
	// Room is the bootstrap Room joining a disaggregated pair (0: none).
	Room int32
	// Slots are the circuit-breaker places the attempt holds.
	Slots BreakerSlots
	// SelfAborting: the legs abort themselves when the attempt ends early
	// (the disaggregated abort rules), so the pipeline sends no Abort.
	SelfAborting bool
	// Run sends the attempt and keeps what it reserved until end.
	Run Run
}

// A Run is the part of a plan that holds state while the attempt is in
// flight: how it is sent and what its first token, its end and a failed
// Abort change.
type Run interface {
	// Start sends the attempt; its stream ends when ctx does.
	Start(ctx context.Context, req *workers.GenerateRequest) (workers.Stream, error)
	// FirstToken is told when the first output token reached the relay.
	FirstToken(at time.Time)
	// End releases what the attempt holds and reports the outcome to the
	// policies that learn from it. It is called once, whatever happened.
	End(out policy.Outcome)
	// Aborted is told how the Abort the pipeline sent (after end) fared;
	// again sends it once more.
	Aborted(err error, again func() error)
}

// Leg is one engine call of an attempt.
type Leg struct {
	Role     string // "regular", "prefill" or "decode"
	Worker   *workers.Worker
	Policy   string          // the name of the policy that chose Worker
	Decision policy.Decision // its decision
	// Span is the leg's client Span, set by startLegs (nil before, and
	// when not tracing).
	Span trace.Span
}

// Served is the worker whose tokens the client sees.
func (p *Plan) Served() *workers.Worker { return p.Legs[len(p.Legs)-1].Worker }

// Decision is the policy Decision that placed the client-visible worker.
func (p *Plan) Decision() policy.Decision { return p.Legs[len(p.Legs)-1].Decision }

// Leg returns the attempt's Leg of role, or nil.
func (p *Plan) Leg(role string) *Leg {
	for i := range p.Legs {
		if p.Legs[i].Role == role {
			return &p.Legs[i]
		}
	}
	return nil
}

// blame returns the worker that caused a failure of this attempt: the leg a
// *pd.LegError names, else the served worker.
func (p *Plan) blame(err error) *workers.Worker {
	var le *pd.LegError
	if errors.As(err, &le) {
		if l := p.Leg(le.Leg); l != nil {
			return l.Worker
		}
	}
	return p.Served()
}

// settle reports the attempt to the workers' circuit breakers: nil is a
// success; a failure counts against the worker it blames when it is the
// worker's fault, and is ignored otherwise. Called once.
func (p *Plan) settle(f *failure) { p.Slots.settle(f) }

// logAttrs describe the plan in log lines.
func (p *Plan) logAttrs() []any {
	first := &p.Legs[0]
	if len(p.Legs) == 1 {
		return []any{"worker", first.Worker.URL(), "policy", first.Policy, "branch", first.Decision.Branch, "decision", why{&first.Decision}}
	}
	attrs := make([]any, 0, 2*len(p.Legs)+6)
	for _, l := range p.Legs {
		attrs = append(attrs, l.Role, l.Worker.URL())
	}
	return append(attrs, "room", p.Room, first.Role+"_branch", first.Decision.Branch, "decision", why{&first.Decision})
}

// traceAttrs describe the decisions on the selection span: the first leg's
// policy and prediction, the served worker, and the other legs beside them.
func (p *Plan) traceAttrs() []attribute.KeyValue {
	first, last := &p.Legs[0], &p.Legs[len(p.Legs)-1]
	attrs := []attribute.KeyValue{attrPolicy.String(first.Policy), attrBranch.String(first.Decision.Branch),
		attrPredictedCached.Int(first.Decision.PredictedCachedTokens), attrWorker.String(last.Worker.URL())}
	if len(p.Legs) == 1 {
		return attrs
	}
	for _, l := range p.Legs[:len(p.Legs)-1] {
		attrs = append(attrs, attribute.String("kvgate."+l.Role+".worker", l.Worker.URL()))
	}
	return append(attrs, attribute.String("kvgate."+last.Role+".policy", last.Policy),
		attribute.String("kvgate."+last.Role+".policy.branch", last.Decision.Branch),
		attribute.Int64("kvgate.pd.room", int64(p.Room)))
}

// Reason says why each leg went where it did: the decision's own words for
// one leg, each leg's prefixed with its role for several.
func (p *Plan) Reason() string {
	if len(p.Legs) == 1 {
		return p.Legs[0].Decision.Why()
	}
	var b strings.Builder
	for i := range p.Legs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.Legs[i].Role + ": " + p.Legs[i].Decision.Why())
	}
	return b.String()
}

// why logs a decision's reason, which policies build only when asked
// (Decision.Why): a logger at a level that drops the line never asks. One
// pointer wide, it goes into the attributes without an allocation.
type why struct{ d *policy.Decision }

func (w why) LogValue() slog.Value { return slog.StringValue(w.d.Why()) }

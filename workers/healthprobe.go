package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/fault"
)

// HealthProbe is what the health monitor asks an engine to judge whether it
// can serve. Engines implement their HealthCheck unevenly (some answer an
// empty message, whose healthy field decodes as false, while Generate
// works), so the probe is a choice, made per worker in the default mode.
type HealthProbe int

const (
	// ProbeAuto uses the engine's HealthCheck while it has ever said
	// healthy; when it answers UNIMPLEMENTED, or an empty message without
	// having once said healthy, the worker is judged by grpc.health.v1 if
	// the engine serves it, else by GetModelInfo answering.
	ProbeAuto HealthProbe = iota
	// ProbeEngine: the engine's HealthCheck must say healthy=true.
	ProbeEngine
	// ProbeModelInfo: GetModelInfo must answer.
	ProbeModelInfo
	// ProbeGRPCHealth: the standard grpc.health.v1 Health/Check of the
	// whole server must say SERVING.
	ProbeGRPCHealth
	// ProbeNone asks nothing: a worker is taken out only by its circuit
	// breaker, that is by failing requests.
	ProbeNone
)

var probeNames = [...]string{"auto", "engine", "model-info", "grpc-health", "none"}

func (p HealthProbe) String() string {
	if p < 0 || int(p) >= len(probeNames) {
		return fmt.Sprintf("HealthProbe(%d)", int(p))
	}
	return probeNames[p]
}

// ParseHealthProbe reads a probe as named on the command line.
func ParseHealthProbe(s string) (HealthProbe, error) {
	for i, n := range probeNames {
		if strings.EqualFold(strings.TrimSpace(s), n) {
			return HealthProbe(i), nil
		}
	}
	return ProbeAuto, fmt.Errorf("unknown health check %q (want %s)", s, strings.Join(probeNames[:], ", "))
}

// ErrEmptyHealth is Backend.Health's error for a HealthCheck answered with
// neither healthy=true nor a message: what an engine that never fills the
// answer sends. It wraps ErrUnhealthy; ProbeAuto tells it from an engine
// saying why it is unhealthy.
var ErrEmptyHealth = fmt.Errorf("%w: HealthCheck answered an empty message (healthy unset)", ErrUnhealthy)

// standardHealthChecker is implemented by the adapters, which hold the
// engine's connection, so that the monitor can ask grpc.health.v1 on it.
type standardHealthChecker interface {
	StandardHealth(ctx context.Context) error
}

func (b *sglangBackend) StandardHealth(ctx context.Context) error { return standardHealth(ctx, b.conn) }
func (b *vllmBackend) StandardHealth(ctx context.Context) error   { return standardHealth(ctx, b.conn) }

func (b rankBackend) StandardHealth(ctx context.Context) error {
	return standardHealthOf(ctx, b.Backend)
}

// standardHealthOf asks b's engine grpc.health.v1; a backend without a
// connection answers an Unsupported fault.
func standardHealthOf(ctx context.Context, b Backend) error {
	if s, ok := b.(standardHealthChecker); ok {
		return s.StandardHealth(ctx)
	}
	return fault.Newf(fault.Unsupported, "the adapter cannot ask grpc.health.v1")
}

// modelInfoAnswers is ProbeModelInfo's check: GetModelInfo answers. Only
// that call: Backend.Info may ask more (vLLM's asks GetLoads for the KV
// capacity), which an engine may lack.
func modelInfoAnswers(ctx context.Context, b Backend) error {
	var err error
	switch b := b.(type) {
	case *sglangBackend:
		_, err = b.c.GetModelInfo(ctx, &sglang.GetModelInfoRequest{})
	case *vllmBackend:
		_, err = b.c.GetModelInfo(ctx, &vllm.GetModelInfoRequest{})
	case rankBackend:
		err = modelInfoAnswers(ctx, b.Backend)
	default:
		_, err = b.Info(ctx)
	}
	return err
}

// standardHealth asks grpc.health.v1 for the whole server's status.
func standardHealth(ctx context.Context, conn grpc.ClientConnInterface) error {
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%w: grpc.health.v1 says %s", ErrUnhealthy, s)
	}
	return nil
}

// prober runs one engine connection's health checks and remembers, for
// ProbeAuto, what the engine has shown: whether its HealthCheck ever said
// healthy, and which checks it lacks (until LackingRecheck has passed, so an
// engine upgraded in place is judged by its own check again). Only the
// monitor's goroutine for the connection touches it, one round at a time.
type prober struct {
	mode HealthProbe
	url  string
	log  *slog.Logger
	now  func() time.Time

	saidHealthy     bool        // HealthCheck has said healthy=true at least once
	noEngineUntil   time.Time   // HealthCheck answered UNIMPLEMENTED: skip it until then
	noStandardUntil time.Time   // grpc.health.v1 is not served: skip it until then
	used            HealthProbe // ProbeAuto until the first check
}

func newProber(mode HealthProbe, url string, log *slog.Logger) *prober {
	return &prober{mode: mode, url: url, log: log, now: time.Now, used: ProbeAuto}
}

// check runs the connection's check once through w's backend.
func (p *prober) check(ctx context.Context, w *Worker) error {
	b := w.Backend()
	switch p.mode {
	case ProbeEngine:
		p.use(ProbeEngine, "configured")
		return b.Health(ctx)
	case ProbeModelInfo:
		p.use(ProbeModelInfo, "configured")
		return modelInfoAnswers(ctx, b)
	case ProbeGRPCHealth:
		p.use(ProbeGRPCHealth, "configured")
		return standardHealthOf(ctx, b)
	case ProbeNone:
		p.use(ProbeNone, "configured")
		return nil
	}
	return p.auto(ctx, b)
}

// auto is ProbeAuto's check. An engine that has once said healthy=true
// is held to its HealthCheck: a later false (empty or not) is unhealthy.
// An explicit unhealthy answer with a message, or a failed call, counts as
// a failure whatever the engine said before.
func (p *prober) auto(ctx context.Context, b Backend) error {
	var why string
	if now := p.now(); !now.Before(p.noEngineUntil) {
		err := b.Health(ctx)
		switch {
		case err == nil:
			p.saidHealthy = true
			p.use(ProbeEngine, "HealthCheck says healthy")
			return nil
		case Unimplemented(err):
			p.noEngineUntil = now.Add(LackingRecheck)
			why = "HealthCheck answers UNIMPLEMENTED"
		case errors.Is(err, ErrEmptyHealth) && !p.saidHealthy:
			why = "HealthCheck answers an empty message and has never said healthy"
		default:
			if p.used == ProbeAuto {
				p.use(ProbeEngine, "HealthCheck answers")
			}
			return err
		}
	} else {
		why = "HealthCheck answers UNIMPLEMENTED"
	}
	if now := p.now(); !now.Before(p.noStandardUntil) {
		err := standardHealthOf(ctx, b)
		switch {
		case Unimplemented(err) || status.Code(err) == codes.NotFound:
			p.noStandardUntil = now.Add(LackingRecheck)
		case err == nil || errors.Is(err, ErrUnhealthy):
			p.use(ProbeGRPCHealth, why+"; grpc.health.v1 is served")
			return err
		default:
			return err // the call failed, which says nothing of what is served
		}
	}
	p.use(ProbeModelInfo, why+"; grpc.health.v1 is not served")
	return modelInfoAnswers(ctx, b)
}

// use records the check in use and logs when it changes: once per
// worker, and again only if the engine changes what it shows.
func (p *prober) use(check HealthProbe, why string) {
	if check == p.used {
		return
	}
	first := p.used == ProbeAuto
	p.used = check
	switch {
	case p.mode != ProbeAuto:
	case first && check == ProbeEngine:
		p.log.Debug("worker health judged by its HealthCheck", "worker", p.url)
	default:
		p.log.Info("worker health check chosen", "worker", p.url, "check", check.String(), "why", why)
	}
}

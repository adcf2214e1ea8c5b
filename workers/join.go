package workers

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/kvgate/kvgate/fault"
)

// Join's retry schedule: the first retry comes after about joinBackoffMin,
// each later one waits twice as long up to joinBackoffMax. Every wait is
// drawn uniformly from [d/2, d], so that routers restarted together do not
// knock on an engine in step.
const (
	joinBackoffMin = 100 * time.Millisecond
	joinBackoffMax = 5 * time.Second
)

// Join connects the worker at addr and adds it to reg. An engine that is
// unreachable (or not ready) does not fail the start of a router: Join then
// registers an unhealthy placeholder for the URL, whose Backend answers
// UNAVAILABLE to everything (so health checks and callers need no special
// case) and whose ModelInfo is zero, and keeps connecting in the background
// with jittered exponential backoff. When it connects, the placeholder is
// replaced in place by the connected, healthy worker (Registry.Watch reports
// it as one change: the placeholder Removed, the worker Added). Retrying ends
// when ctx ends or when the placeholder is removed from reg.
//
// Join returns the worker it registered, connected or not (see
// Worker.Connected), and an error only for a malformed address or breaker
// configuration, a URL already registered, or an engine that answered but
// opts.Admit refused (a placeholder's engine that Admit refuses stays out,
// and is retried slowly in case it is restarted). log may be nil. With
// opts.DPAware an engine with several data-parallel ranks is registered as
// one worker per rank (see JoinAll); Join returns the first.
func Join(ctx context.Context, reg *Registry, addr string, opts ConnectOptions, log *slog.Logger) (*Worker, error) {
	ws, err := JoinAll(ctx, reg, addr, opts, log)
	if err != nil {
		return nil, err
	}
	return ws[0], nil
}

// JoinAll is Join returning every worker registered for the engine: one,
// or with opts.DPAware one per data-parallel rank (a placeholder that joins
// later becomes the ranks then).
func JoinAll(ctx context.Context, reg *Registry, addr string, opts ConnectOptions, log *slog.Logger) ([]*Worker, error) {
	a, err := ParseWorkerAddress(addr)
	if err != nil {
		return nil, err
	}
	if opts.Breaker != nil {
		if err := opts.Breaker.Validate(); err != nil {
			return nil, fmt.Errorf("worker %s: %w", a.URL, err)
		}
	}
	if _, ok := reg.Current().Get(a.URL); ok || len(reg.Engine(a.URL)) > 0 {
		return nil, fmt.Errorf("worker %s: %w", a.URL, ErrWorkerExists)
	}
	ws, err := ConnectAll(ctx, a.URL, opts)
	return JoinResult(ctx, reg, a.URL, opts, ws, err, log)
}

// JoinResult registers the outcome of a ConnectAll to addr already tried,
// as JoinAll does: ws when the connect succeeded (connectErr nil), else an
// unhealthy placeholder that keeps connecting in the background until ctx
// ends or it is removed. Callers that connect several workers concurrently
// use it to register them in a fixed order.
func JoinResult(ctx context.Context, reg *Registry, addr string, opts ConnectOptions, ws []*Worker, connectErr error, log *slog.Logger) ([]*Worker, error) {
	a, err := ParseWorkerAddress(addr)
	if err != nil {
		return nil, err
	}
	log = orDiscard(log).With("worker", a.URL)
	if connectErr == nil {
		if err := admitAll(opts, ws); err != nil {
			for _, w := range ws {
				_ = w.Close()
			}
			return nil, err
		}
		if err := reg.AddAll(ws...); err != nil {
			for _, w := range ws {
				_ = w.Close()
			}
			return nil, err
		}
		return ws, nil
	}
	p := newPlaceholder(a.URL, opts)
	if err := reg.Add(p); err != nil {
		return nil, err
	}
	log.Warn("worker not connected at start; registered as unhealthy, retrying in the background", "err", connectErr)
	go rejoin(ctx, reg, p, opts, log)
	return []*Worker{p}, nil
}

// rejoin connects p's engine with backoff and puts the worker in p's place.
func rejoin(ctx context.Context, reg *Registry, p *Worker, opts ConnectOptions, log *slog.Logger) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := reg.Watch(func(c Change) {
		if slices.Contains(c.Removed, p) {
			cancel()
		}
	})
	defer stop()
	if !slices.Contains(reg.Current().Workers, p) {
		log.Info("stopped retrying: the worker was removed before it connected")
		return
	}

	delay := joinBackoffMin
	refused := ""
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(delay/2 + rand.N(delay/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			log.Info("stopped retrying: the worker never connected", "attempts", attempt-1, "why", context.Cause(ctx))
			return
		case <-t.C:
		}
		ws, err := ConnectAll(ctx, p.url, opts)
		if err != nil {
			log.Debug("worker still not connected", "attempt", attempt, "err", err)
			delay = min(2*delay, joinBackoffMax)
			continue
		}
		if err := admitAll(opts, ws); err != nil {
			// The engine may be restarted with the right model: keep
			// trying, slowly, and say why once per reason.
			for _, w := range ws {
				_ = w.Close()
			}
			if err.Error() != refused {
				log.Error("worker connected but not admitted; retrying in case it is restarted", "err", err)
				refused = err.Error()
			}
			delay = joinBackoffMax
			continue
		}
		for _, w := range ws {
			w.SetDraining(p.Draining())
		}
		if err := reg.ReplaceWith(p, ws...); err != nil {
			for _, w := range ws {
				_ = w.Close()
			}
			log.Info("worker connected after its placeholder left the registry; connection dropped", "err", err)
			return
		}
		w := ws[0]
		log.Info("worker connected", "attempts", attempt, "protocol", w.Protocol(), "model", w.Info().Model, "dp_ranks", len(ws))
		return
	}
}

// admit asks opts.Admit, if any, whether w may join.
// admitAll asks opts.Admit about each of an engine's workers (its ranks).
func admitAll(opts ConnectOptions, ws []*Worker) error {
	if opts.Admit == nil {
		return nil
	}
	for _, w := range ws {
		if err := opts.Admit(w); err != nil {
			return err
		}
	}
	return nil
}

// newPlaceholder is the unhealthy stand-in Join registers for an engine it
// could not reach yet.
func newPlaceholder(url string, opts ConnectOptions) *Worker {
	w := NewWorker(url, opts.Protocol, opts.Role, ModelInfo{}, notConnected{url: url}, nil)
	if opts.Breaker != nil {
		_ = w.breaker.Reconfigure(*opts.Breaker) // validated by Join
	}
	w.connected = false
	w.SetHealthy(false)
	return w
}

// notConnected is a placeholder's Backend: every call fails with
// an Unavailable fault, as a call to an unreachable engine would.
type notConnected struct{ url string }

func (b notConnected) err() error {
	return fault.Newf(fault.Unavailable, "worker %s not connected yet", b.url)
}

func (b notConnected) Generate(context.Context, *GenerateRequest) (Stream, error) {
	return nil, b.err()
}
func (b notConnected) Embed(context.Context, *EmbedRequest) (*EmbedResult, error) {
	return nil, b.err()
}
func (b notConnected) Abort(context.Context, string) error       { return b.err() }
func (b notConnected) Health(context.Context) error              { return b.err() }
func (b notConnected) Loads(context.Context) (Load, error)       { return Load{}, b.err() }
func (b notConnected) Info(context.Context) (ModelInfo, error)   { return ModelInfo{}, b.err() }
func (b notConnected) Tokenizer(context.Context) ([]byte, error) { return nil, b.err() }

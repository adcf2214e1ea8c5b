package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// joinAll registers every worker, in the order given (x-target-worker
// indices and hash rings follow it), after trying them all concurrently. An
// engine that does not answer yet is registered unhealthy and keeps being
// tried in the background (until bg ends), so one unreachable engine never
// stops the router from starting.
func joinAll(ctx, bg context.Context, reg *workers.Registry, urls []string, opts workers.ConnectOptions, log *slog.Logger) error {
	for _, u := range urls {
		if _, err := workers.ParseWorkerAddress(u); err != nil {
			return err // before dialing anything
		}
	}
	ws := make([][]*workers.Worker, len(urls))
	errs := make([]error, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() { ws[i], errs[i] = workers.ConnectAll(ctx, u, opts) })
	}
	wg.Wait()
	var failed []error
	for i, u := range urls {
		joined, err := workers.JoinResult(bg, reg, u, opts, ws[i], errs[i], log)
		if err != nil {
			failed = append(failed, err)
			continue
		}
		for _, w := range joined {
			logRegistered(log, w)
		}
	}
	return errors.Join(failed...)
}

func logRegistered(log *slog.Logger, w *workers.Worker) {
	if !w.Connected() {
		return // Join said so
	}
	info := w.Info()
	log.Info("worker registered", "worker", w.URL(), "protocol", w.Protocol().String(), "role", w.Role().String(),
		"model", info.Model, "vocab_size", info.VocabSize, "max_context", info.MaxContextLength, "page_size", info.PageSize)
}

// waitConnected returns when at least one worker of reg is connected, or
// fails when ctx ends first.
func waitConnected(ctx context.Context, reg *workers.Registry) error {
	joined := make(chan struct{}, 1)
	stop := reg.Watch(func(workers.Change) {
		select {
		case joined <- struct{}{}:
		default:
		}
	})
	defer stop()
	for {
		for _, w := range reg.Snapshot() {
			if w.Connected() {
				return nil
			}
		}
		select {
		case <-joined:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// forgetRemoved makes the policies drop what they keep about workers that
// left the fleet (a placeholder replaced by its connected worker keeps its
// URL and is not forgotten).
func forgetRemoved(reg *workers.Registry, route *kvRoute, policies func() []policy.Policy) (stop func()) {
	return reg.Watch(func(c workers.Change) {
		if route != nil && len(c.Removed) > 0 {
			route.settle()
		}
		added := make(map[string]bool, len(c.Added))
		for _, w := range c.Added {
			added[w.URL()] = true
		}
		for _, w := range c.Removed {
			if added[w.URL()] {
				continue
			}
			for _, p := range policies() {
				if f, ok := p.(policy.Forgetter); ok {
					f.Forget(w.URL())
				}
			}
		}
	})
}

// AddWorker connects to an engine and adds it to the fleet, as
// Admin.AddWorker asks: an engine that does not answer yet is added
// unhealthy and joins when it answers.
// Only hosts Config.AdminWorkerAllow allows are dialed.
func (g *Router) AddWorker(ctx context.Context, addr string, role workers.Role, proto workers.Protocol, bootstrapPort int) (*workers.Worker, error) {
	if err := g.limits.allowed(addr); err != nil {
		return nil, err
	}
	w, err := g.addWorker(ctx, addr, role, proto, bootstrapPort)
	if err == nil {
		g.Server.UpdateHealth()
	}
	return w, err
}

// addWorker is AddWorker without the server's health update and the
// address restriction, for callers that may run before the server exists
// (service discovery, whose pods the operator chose). The fleet's size is
// bounded here, for both.
func (g *Router) addWorker(ctx context.Context, addr string, role workers.Role, proto workers.Protocol, bootstrapPort int) (*workers.Worker, error) {
	switch {
	case !g.pdMode && role != workers.RoleRegular:
		return nil, fmt.Errorf("a %s worker needs a router started with --pd-disaggregation", role)
	case g.pdMode && role == workers.RoleRegular:
		return nil, errors.New("with --pd-disaggregation a worker is a prefill or a decode worker")
	case bootstrapPort != 0 && role != workers.RolePrefill:
		return nil, errors.New("bootstrap_port is for prefill workers")
	case bootstrapPort < 0 || bootstrapPort > 65535:
		return nil, fmt.Errorf("bootstrap_port %d is not a port", bootstrapPort)
	}
	release, err := g.limits.reserve(g.Registry)
	if err != nil {
		g.log.Warn("worker not added: the fleet is full", "address", addr, "max_workers", g.limits.max)
		return nil, err
	}
	defer release()
	opts := g.connect
	opts.Role = role
	if proto != workers.ProtocolUnknown {
		opts.Protocol = proto
	}
	ws, err := workers.JoinAll(g.bgCtx, g.Registry, addr, opts, g.log)
	if err != nil {
		return nil, err
	}
	if bootstrapPort > 0 {
		g.setBootstrapPort(ws[0].Endpoint(), bootstrapPort)
	}
	for _, w := range ws {
		logRegistered(g.log, w)
	}
	return ws[0], nil
}

// RemoveWorker drains a worker and removes it: it gets no new requests, its
// requests in flight may finish until drain ends, the connection is then
// closed (cutting what is left: a request before its first token is retried
// elsewhere, one after it ends with UNAVAILABLE), and the policies forget it.
// An engine's address removes all of its data-parallel rank targets at once
// (url@rank removes one). It returns the worker (the first rank) and how
// many requests were cut.
func (g *Router) RemoveWorker(ctx context.Context, addr string, drain time.Duration) (*workers.Worker, int, error) {
	w, cut, err := g.removeWorker(ctx, addr, drain)
	if err == nil {
		g.Server.UpdateHealth()
	}
	return w, cut, err
}

// removeWorker is RemoveWorker without the server's health update (see
// addWorker).
func (g *Router) removeWorker(ctx context.Context, addr string, drain time.Duration) (*workers.Worker, int, error) {
	ws := g.Registry.Engine(addr)
	if len(ws) == 0 {
		return nil, 0, fmt.Errorf("worker %s: %w", addr, workers.ErrWorkerNotFound)
	}
	if drain <= 0 {
		drain = g.drainTimeout
	}
	dctx, cancel := context.WithTimeout(ctx, drain)
	for _, w := range ws {
		w.SetDraining(true)
		g.log.Info("draining worker", "worker", w.URL(), "in_flight", w.InFlight(), "drain_timeout", drain)
	}
	for _, w := range ws {
		_ = w.WaitIdle(dctx)
	}
	cancel()
	cut := 0
	for _, w := range ws {
		cut += w.InFlight()
	}
	if err := g.Registry.RemoveAll(ws...); err != nil {
		return nil, 0, err
	}
	if g.pdMode && len(g.Registry.Engine(ws[0].Endpoint())) == 0 {
		g.setBootstrapPort(ws[0].Endpoint(), 0)
	}
	for _, w := range ws {
		_ = w.Close()
		g.log.Info("worker removed", "worker", w.URL())
	}
	g.log.Info("engine removed", "address", addr, "targets", len(ws), "cut_requests", cut)
	return ws[0], cut, nil
}

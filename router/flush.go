package router

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/server"
	"github.com/kvgate/kvgate/workers"
)

// FlushCache flushes an engine's prefix cache, as Admin.FlushCache asks,
// then makes its model's policies forget what they mirror of every rank of
// it: after a flush the engine holds nothing, and a tree still predicting
// hits there would send requests to a cold cache. The engine is asked
// first; one that refuses leaves the mirrors as they were.
func (g *Router) FlushCache(ctx context.Context, addr string, timeout time.Duration) (*workers.Worker, string, error) {
	ws := g.Registry.Engine(addr)
	if len(ws) == 0 {
		return nil, "", fmt.Errorf("worker %s: %w", addr, workers.ErrWorkerNotFound)
	}
	w := ws[0]
	f, ok := w.Backend().(workers.CacheFlusher)
	if !ok || !w.Connected() {
		if !w.Connected() {
			return nil, "", fmt.Errorf("worker %s is not connected", w.URL())
		}
		return nil, "", fmt.Errorf("worker %s: %w", w.URL(), server.ErrNoFlushCache)
	}
	msg, err := f.FlushCache(ctx, timeout)
	if status.Code(err) == codes.Unimplemented {
		return nil, "", fmt.Errorf("worker %s: %w", w.URL(), server.ErrNoFlushCache)
	}
	if err != nil {
		return nil, msg, fmt.Errorf("worker %s: %w", w.URL(), err)
	}
	for _, rank := range ws {
		m := g.Server.Models().Of(rank)
		if m == nil {
			continue
		}
		for _, p := range m.Policies() {
			if c, ok := p.(policy.CacheForgetter); ok {
				c.ForgetCache(rank.URL())
			}
		}
	}
	g.log.Info("worker's cache flushed; the router forgot what it mirrored of it", "worker", w.URL(), "targets", len(ws), "message", msg)
	return w, msg, nil
}

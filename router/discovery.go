package router

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvgate/kvgate/discovery"
	"github.com/kvgate/kvgate/workers"
)

// startDiscovery starts Kubernetes service discovery (Config.Discovery) in
// the background, before the tokenizers are loaded, so that a tokenizer can
// come from the first engine discovered. With Config.WaitForWorkers it
// returns when a discovered worker is connected.
func (g *Router) startDiscovery(ctx context.Context, cfg Config) error {
	if cfg.Discovery == nil {
		return nil
	}
	dc := *cfg.Discovery
	if dc.PD != cfg.PD {
		return fmt.Errorf("service discovery's PD mode (%v) differs from the router's (%v)", dc.PD, cfg.PD)
	}
	if err := dc.Validate(); err != nil {
		return err
	}
	if dc.Pods == nil {
		return errors.New("service discovery needs a Kubernetes client")
	}
	if dc.Logger == nil {
		dc.Logger = g.log
	}
	f := &discoveredFleet{g: g}
	bg := g.bgCtx
	g.bg.Go(func() { _ = discovery.Run(bg, f, dc) })
	if cfg.WaitForWorkers {
		wctx, cancel := context.WithTimeout(ctx, cfg.StartupTimeout)
		err := waitConnected(wctx, g.Registry)
		cancel()
		if err != nil {
			return fmt.Errorf("no discovered worker reachable within --worker-startup-timeout (%v)", cfg.StartupTimeout)
		}
	}
	return nil
}

// discoveredFleet is the fleet as service discovery changes it: the
// router's, without Admin's address restriction (the operator chose the
// pods).
type discoveredFleet struct{ g *Router }

func (f *discoveredFleet) AddWorker(ctx context.Context, addr string, role workers.Role, proto workers.Protocol, bootstrapPort int) (*workers.Worker, error) {
	w, err := f.g.addWorker(ctx, addr, role, proto, bootstrapPort)
	f.g.Server.UpdateHealth()
	return w, err
}

func (f *discoveredFleet) RemoveWorker(ctx context.Context, addr string, drain time.Duration) (*workers.Worker, int, error) {
	w, cut, err := f.g.removeWorker(ctx, addr, drain)
	f.g.Server.UpdateHealth()
	return w, cut, err
}

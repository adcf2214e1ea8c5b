package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvgate/kvgate/discovery"
	"github.com/kvgate/kvgate/workers"
)

// startDiscovery starts Kubernetes service discovery (Config.Discovery) in
// the background, once the policies exist (AddWorker needs the PD
// dispatcher) and before the tokenizer is loaded, so that the tokenizer can
// come from the first engine discovered. With Config.WaitForWorkers it
// returns when a discovered worker is connected.
//
// Until the server exists, discovery's changes skip the server's health
// update; serverBuilt, called once the server is built, turns it on and
// updates the health once for the changes made before. It is nil when
// discovery is off.
func (g *Gateway) startDiscovery(ctx context.Context, cfg Config) (serverBuilt func(), err error) {
	if cfg.Discovery == nil {
		return nil, nil
	}
	dc := *cfg.Discovery
	if dc.PD != cfg.PD {
		return nil, fmt.Errorf("service discovery's PD mode (%v) differs from the router's (%v)", dc.PD, cfg.PD)
	}
	if err := dc.Validate(); err != nil {
		return nil, err
	}
	if dc.Pods == nil {
		return nil, errors.New("service discovery needs a Kubernetes client")
	}
	if dc.Logger == nil {
		dc.Logger = g.log
	}
	f := &discoveredFleet{g: g, built: make(chan struct{})}
	bg := g.bgCtx
	g.bg.Go(func() { _ = discovery.Run(bg, f, dc) })
	if cfg.WaitForWorkers {
		wctx, cancel := context.WithTimeout(ctx, cfg.StartupTimeout)
		err := waitConnected(wctx, g.Registry)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("no discovered worker reachable within --worker-startup-timeout (%v)", cfg.StartupTimeout)
		}
	}
	return func() {
		close(f.built)
		g.Server.UpdateHealth()
	}, nil
}

// discoveredFleet is the fleet as service discovery changes it: the
// gateway's, updating the server's health once the server is built.
type discoveredFleet struct {
	g     *Gateway
	built chan struct{} // closed once g.Server is set
}

func (f *discoveredFleet) AddWorker(ctx context.Context, addr string, role workers.Role, proto workers.Protocol, bootstrapPort int) (*workers.Worker, error) {
	w, err := f.g.addWorker(ctx, addr, role, proto, bootstrapPort)
	f.updateHealth()
	return w, err
}

func (f *discoveredFleet) RemoveWorker(ctx context.Context, addr string, drain time.Duration) (*workers.Worker, int, error) {
	w, cut, err := f.g.removeWorker(ctx, addr, drain)
	f.updateHealth()
	return w, cut, err
}

func (f *discoveredFleet) updateHealth() {
	select {
	case <-f.built:
		f.g.Server.UpdateHealth()
	default:
	}
}

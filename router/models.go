package router

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvgate/kvgate/modeltable"
	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// The models the router serves are the entries of the server's model table
// (server.Server.Models). The router adds them as their workers connect
// (the one model of a router without --enable-igw at start-up), builds
// their policies from the configuration and loads their tokenizers; it keeps
// no record of its own.

// setBootstrapPort records a prefill worker's bootstrap port in the table
// every model's PD dispatcher shares, present and future (0 forgets it).
func (g *Router) setBootstrapPort(url string, port int) { g.ports.Set(url, port) }

// ensureModel serves the model named name unless it is served: its
// policies are built and its entry added at once (so its KV events and
// requests with token ids have a home), and its tokenizer loads in the
// background. It returns the model's entry's ready channel, closed when the
// tokenizer has loaded or failed to.
func (g *Router) ensureModel(cfg Config, name string) <-chan struct{} {
	models := g.Server.Models()
	e, added, err := models.Ensure(name, func() (modeltable.Spec, error) { return g.buildModel(cfg, name) })
	if err != nil {
		// The configuration was validated; this is a bug, not a worker's fault.
		g.log.Error("model cannot be served", "model", name, "error", err)
		closed := make(chan struct{})
		close(closed)
		return closed
	}
	if added {
		bg := g.bgCtx
		g.bg.Go(func() { g.loadModelText(bg, cfg, name) })
	}
	return e.Ready()
}

// paged is a policy that matches prompts by pages of a size: cache_aware's
// tree pages, vllm_cache_aware's blocks. The model shows the size its
// policy uses (ListModels), so that a worker whose engine reports another
// is seen to be matched approximately.
type paged interface{ PageSize() int }

// buildModel makes a model's policies from the configuration, their page
// size learned from the model's workers, and starts their background loops.
func (g *Router) buildModel(cfg Config, name string) (modeltable.Spec, error) {
	ws := g.Server.Models().Workers(g.Registry, name)
	spec := modeltable.Spec{Policies: map[workers.Role]policy.Policy{}, PageSize: cfg.Options.CacheAware.BlockSize}
	routing := cfg.modelRouting(name)
	var runners []policy.Runner
	newPolicy := func(pname string, role workers.Role) (policy.Policy, error) {
		o := routing.options
		if o.Logger == nil {
			o.Logger = g.log
		}
		if cfg.LearnBlockSize || cfg.LearnVllmBlockSize {
			learned := learnedPageSize(ws, role)
			if cfg.LearnBlockSize {
				o.CacheAware.BlockSize = learned
			}
			if cfg.LearnVllmBlockSize {
				o.VllmCacheAware.BlockSize = learned
			}
		}
		p, err := policy.New(pname, o)
		if err != nil {
			return nil, err
		}
		if role != workers.RoleDecode {
			spec.PageSize = o.CacheAware.BlockSize
			if pp, ok := p.(paged); ok {
				spec.PageSize = pp.PageSize()
			}
		}
		if r, ok := p.(policy.Runner); ok {
			runners = append(runners, r)
		}
		spec.Policies[role] = p
		return p, nil
	}
	if cfg.PD {
		pre, err := newPolicy(routing.prefill, workers.RolePrefill)
		if err != nil {
			return spec, err
		}
		dec, err := newPolicy(routing.decode, workers.RoleDecode)
		if err != nil {
			return spec, err
		}
		spec.PD = pd.New(pd.Config{Prefill: pre, Decode: dec, BootstrapPorts: g.ports})
	} else if _, err := newPolicy(routing.policy, workers.RoleRegular); err != nil {
		return spec, err
	}
	bg := g.bgCtx
	for _, r := range runners {
		g.bg.Go(func() { r.Run(bg) })
	}
	return spec, nil
}

// watchModels serves each model as soon as a connected worker reports it
// (with --enable-igw; the one model of a router without it is served from
// the start), and tells the tokenizer fetch that a worker joined.
func (g *Router) watchModels(cfg Config, joined func()) (stop func()) {
	models := g.Server.Models()
	return g.Registry.Watch(func(c workers.Change) {
		connected := false
		for _, w := range c.Added {
			if w.Connected() {
				g.ensureModel(cfg, models.Grouping().NameOf(w))
				connected = true
			}
		}
		if connected {
			joined()
		}
	})
}

// startModels serves the models of the workers connected now (the one
// model, connected or not, without --enable-igw) and waits until their
// tokenizers have loaded, or ctx ends. A router serving one model fails to
// start when that model's configured tokenizer cannot be loaded or does not
// fit its workers: the operator asked for exactly that tokenizer. With
// --enable-igw such a model serves token ids and the others are unharmed.
func (g *Router) startModels(ctx context.Context, cfg Config) error {
	models := g.Server.Models()
	var names []string
	if models.Grouping() == modeltable.OneModel {
		names = []string{""}
	} else {
		for _, w := range g.Registry.Snapshot() {
			if w.Connected() {
				names = append(names, models.Grouping().NameOf(w))
			}
		}
	}
	for _, name := range names {
		select {
		case <-g.ensureModel(cfg, name):
		case <-ctx.Done():
			return fmt.Errorf("models not ready: %w", ctx.Err())
		}
	}
	if models.Grouping() == modeltable.OneModel {
		if m := models.Get(""); m == nil {
			return errors.New("the model cannot be served (see the log)")
		} else if m.TextError != nil {
			return m.TextError
		}
	}
	return nil
}

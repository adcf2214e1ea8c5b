package gateway

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/server"
	"github.com/kvgate/kvgate/tokenize/textmodel"
	"github.com/kvgate/kvgate/workers"
)

// modelCtx is one model's routing context: its own policy instances (so its
// own tree, page size and budget) and, with PD, its own pairing.
type modelCtx struct {
	name   string
	main   policy.Policy // regular, or with PD the prefill policy
	pd     *pd.Dispatcher
	byRole map[workers.Role]policy.Policy
	// pageSize is the tree's page size, learned from the model's workers.
	pageSize int
}

// models holds the models' contexts. Readers (KV event delivery, the removal
// watch) load the map without a lock; writers copy it.
type models struct {
	mu     sync.Mutex
	byName atomic.Pointer[map[string]*modelCtx]
	// ports are the prefill workers' bootstrap ports, which every model's
	// PD dispatcher is told.
	ports map[string]int
}

func (ms *models) get(name string) *modelCtx {
	if m := ms.byName.Load(); m != nil {
		return (*m)[name]
	}
	return nil
}

func (ms *models) all() []*modelCtx {
	m := ms.byName.Load()
	if m == nil {
		return nil
	}
	return slices.Collect(maps.Values(*m))
}

// policies are every model's policies, for the removal watch.
func (ms *models) policies() []policy.Policy {
	var out []policy.Policy
	for _, m := range ms.all() {
		for _, p := range m.byRole {
			out = append(out, p)
		}
	}
	return out
}

// setBootstrapPort records a prefill worker's bootstrap port for every
// model's dispatcher, present and future (0 forgets it).
func (ms *models) setBootstrapPort(url string, port int) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if port > 0 {
		ms.ports[url] = port
	} else {
		delete(ms.ports, url)
	}
	for _, m := range ms.all() {
		if m.pd != nil {
			m.pd.SetBootstrapPort(url, port)
		}
	}
}

// modelKey is the model whose context places requests on w: the model it
// reports with --enable-igw, else the router's one model.
func (g *Gateway) modelKey(w *workers.Worker) string {
	if g.igw {
		return w.Info().Model
	}
	return ""
}

// buildModel makes a model's policies from the configuration, their page
// size learned from ws (the model's workers), and starts their background
// loops. It does not publish the model.
func (g *Gateway) buildModel(cfg Config, name string, ws []*workers.Worker) (*modelCtx, error) {
	m := &modelCtx{name: name, byRole: map[workers.Role]policy.Policy{}, pageSize: cfg.Options.CacheAware.BlockSize}
	var runners []policy.Runner
	newPolicy := func(pname string, role workers.Role) (policy.Policy, error) {
		o := cfg.Options
		if o.Logger == nil {
			o.Logger = g.log
		}
		if cfg.LearnBlockSize {
			o.CacheAware.BlockSize = learnedPageSize(ws, role)
		}
		if role != workers.RoleDecode {
			m.pageSize = o.CacheAware.BlockSize
		}
		p, err := policy.New(pname, o)
		if err != nil {
			return nil, err
		}
		if r, ok := p.(policy.Runner); ok {
			runners = append(runners, r)
		}
		m.byRole[role] = p
		return p, nil
	}
	var err error
	if cfg.PD {
		if m.main, err = newPolicy(cfg.PrefillPolicy, workers.RolePrefill); err != nil {
			return nil, err
		}
		dec, err := newPolicy(cfg.DecodePolicy, workers.RoleDecode)
		if err != nil {
			return nil, err
		}
		g.models.mu.Lock()
		ports := maps.Clone(g.models.ports)
		g.models.mu.Unlock()
		m.pd = pd.New(pd.Config{Prefill: m.main, Decode: dec, BootstrapPorts: ports})
	} else if m.main, err = newPolicy(cfg.Policy, workers.RoleRegular); err != nil {
		return nil, err
	}
	bg := g.bgCtx
	for _, r := range runners {
		g.bg.Go(func() { r.Run(bg) })
	}
	return m, nil
}

// publish makes m the context of its model's workers.
func (ms *models) publish(m *modelCtx) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	next := map[string]*modelCtx{}
	if cur := ms.byName.Load(); cur != nil {
		maps.Copy(next, *cur)
	}
	next[m.name] = m
	ms.byName.Store(&next)
}

// consumesKVEvents reports whether any of the named policies mirrors the
// engines' caches from their KV events, as the policy registry says.
func consumesKVEvents(cfg Config) bool {
	names := []string{cfg.Policy}
	if cfg.PD {
		names = []string{cfg.PrefillPolicy, cfg.DecodePolicy}
	}
	return slices.ContainsFunc(names, policy.MirrorsKVEvents)
}

// watchModels serves, with --enable-igw, each model as soon as a connected
// worker reports it: its policies are built and its route published at once
// (so its KV events and requests with token ids have a home), and its
// tokenizer loads in the background.
func (g *Gateway) watchModels(cfg Config) (stop func()) {
	return g.Registry.Watch(func(c workers.Change) {
		for _, w := range c.Added {
			if w.Connected() {
				g.ensureModel(cfg, w)
			}
		}
	})
}

// ensureModel starts serving w's model unless it is served or starting; it
// returns a channel closed when the model's tokenizer has loaded (or failed
// to).
func (g *Gateway) ensureModel(cfg Config, w *workers.Worker) <-chan struct{} {
	name := g.modelKey(w)
	g.startMu.Lock()
	defer g.startMu.Unlock()
	if ch, ok := g.starting[name]; ok {
		return ch
	}
	ready := make(chan struct{})
	g.starting[name] = ready
	m, err := g.buildModel(cfg, name, g.modelWorkers(name))
	if err != nil {
		// The configuration was validated; this is a bug, not a worker's fault.
		g.log.Error("model cannot be served", "model", name, "error", err)
		close(ready)
		return ready
	}
	g.models.publish(m)
	// Served at once for token ids; its tokenizer follows.
	if err := g.Server.AddModel(server.Model{Name: name, Policy: m.main, PD: m.pd, PageSize: m.pageSize,
		TextLoading: true}); err != nil {
		g.log.Error("model cannot be served", "model", name, "error", err)
		close(ready)
		return ready
	}
	g.bg.Go(func() {
		defer close(ready)
		text, source := g.loadModelText(g.bgCtx, cfg, name)
		if err := g.vocab.arm(name, text); err != nil && text != nil {
			// One router serves many models: a model whose tokenizer
			// does not fit its workers keeps routing token ids.
			g.log.Error("model's tokenizer does not fit its workers: its text, Chat and stop strings are unavailable",
				"model", name, "error", err)
			text, source = nil, ""
			if err := g.vocab.arm(name, nil); err != nil {
				g.log.Error("model's workers disagree", "model", name, "error", err)
			}
		} else if err != nil {
			g.log.Error("model's workers disagree", "model", name, "error", err)
		}
		if err := g.Server.SetModelText(name, text, source); err != nil {
			g.log.Error("model cannot be served", "model", name, "error", err)
			return
		}
		g.log.Info("model served", "model", name, "workers", len(g.modelWorkers(name)), "page_size", m.pageSize,
			"tokenizer", source)
		if text != nil {
			g.textJoinedOnce.Do(func() { close(g.textJoined) })
		}
	})
	return ready
}

// modelWorkers are the registered workers of a model.
func (g *Gateway) modelWorkers(name string) []*workers.Worker {
	var out []*workers.Worker
	for _, w := range g.Registry.Snapshot() {
		if g.modelKey(w) == name {
			out = append(out, w)
		}
	}
	return out
}

// loadModelText finds a model's tokenizer with --enable-igw: its own entry
// of --model-path, else the router-wide one, else GetTokenizer from one of its
// workers. A model without one still routes token ids.
func (g *Gateway) loadModelText(ctx context.Context, cfg Config, name string) (*textmodel.Model, string) {
	if cfg.TokenIDsOnly {
		return nil, ""
	}
	src, ok := cfg.ModelTexts[name]
	if !ok {
		src = cfg.TextSources
	}
	if src.ModelPath != "" || src.TokenizerPath != "" {
		m, err := textmodel.Load(src, cfg.TextOptions)
		if err != nil {
			g.log.Error("model's tokenizer cannot be loaded: its text, Chat and stop strings are unavailable",
				"model", name, "model_path", src.ModelPath, "tokenizer_path", src.TokenizerPath, "error", err)
			return nil, ""
		}
		return m, sourceName(src)
	}
	m, w, err := tokenizerFromWorkers(ctx, cfg, g.modelWorkers(name), g.log)
	if err != nil {
		g.log.Error("model's tokenizer cannot be loaded: its text, Chat and stop strings are unavailable", "model", name, "error", err)
		return nil, ""
	}
	if m != nil {
		return m, "worker " + w.URL()
	}
	g.log.Warn("no tokenizer for model: its text, Chat and stop strings are unavailable; give --model-path "+name+"=PATH",
		"model", name)
	return nil, ""
}

// sourceName says where a tokenizer was loaded from.
func sourceName(src textmodel.Sources) string {
	if src.TokenizerPath != "" {
		return src.TokenizerPath
	}
	return src.ModelPath
}

// waitModels waits until the models of the workers registered now are
// served, or ctx ends.
func (g *Gateway) waitModels(ctx context.Context, cfg Config) error {
	for _, w := range g.Registry.Snapshot() {
		if !w.Connected() {
			continue
		}
		select {
		case <-g.ensureModel(cfg, w):
		case <-ctx.Done():
			return fmt.Errorf("models not ready: %w", ctx.Err())
		}
	}
	return nil
}

package router

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/kvgate/kvgate/modeltable"
	"github.com/kvgate/kvgate/tokenize/textmodel"
	"github.com/kvgate/kvgate/workers"
)

// loadModelText finds a model's tokenizer and chat template, checks them
// against the model's workers and gives them to its entry. A model without
// one still routes token ids; why it has none is logged and kept in its
// entry (startModels fails a one-model router on it).
func (g *Router) loadModelText(ctx context.Context, cfg Config, name string) {
	t := g.findText(ctx, cfg, name)
	if t.Err == nil {
		if err := g.vocab.arm(name, t.Model); err != nil {
			// A tokenizer that does not fit its workers would send ids
			// they reject: the model keeps routing token ids.
			t = modeltable.Text{FromWorkers: t.FromWorkers, Err: err}
			if err := g.vocab.arm(name, nil); err != nil {
				g.log.Error("model's workers disagree", "model", name, "error", err)
			}
		}
	}
	if t.Err != nil {
		g.log.Error("model's tokenizer cannot be served: its text, Chat and stop strings are unavailable",
			"model", name, "error", t.Err)
	}
	if err := g.Server.Models().SetText(name, t); err != nil {
		g.log.Error("model cannot be served", "model", name, "error", err)
		return
	}
	g.log.Info("model served", "model", name, "workers", len(g.Server.Models().Workers(g.Registry, name)),
		"page_size", g.Server.Models().Get(name).PageSize, "tokenizer", t.Source)
	if t.Model != nil && t.FromWorkers {
		g.textJoinedOnce.Do(func() { close(g.textJoined) })
	}
	if t.Model == nil && t.FromWorkers {
		g.wantText() // a worker may have joined while this one looked
	}
}

// findText finds a model's tokenizer: its own entry of --model-path, else
// the one the caller loaded (Config.Text), else the router-wide paths, else
// GetTokenizer from one of its workers, waiting up to the fetch timeout for
// one to connect.
func (g *Router) findText(ctx context.Context, cfg Config, name string) modeltable.Text {
	if cfg.TokenIDsOnly {
		return modeltable.Text{}
	}
	if _, own := cfg.ModelTexts[name]; !own && cfg.Text != nil {
		return modeltable.Text{Model: cfg.Text, Source: sourceName(cfg.TextSources)}
	}
	src := cfg.textSources(name)
	if src.ModelPath != "" || src.TokenizerPath != "" {
		m, err := textmodel.Load(src, cfg.TextOptions)
		if err != nil {
			return modeltable.Text{Err: fmt.Errorf("load tokenizer: %w", err)}
		}
		g.log.Info("tokenizer loaded", "model", name, "model_path", src.ModelPath, "tokenizer_path", src.TokenizerPath,
			"vocab_size", m.Tokenizer().VocabSize(), "chat_template", m.TemplateSource())
		return modeltable.Text{Model: m, Source: sourceName(src)}
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.FetchTimeout)
	err := waitConnected(wctx, g.Registry)
	cancel()
	if err != nil {
		g.log.Warn("no tokenizer: no worker connected within --tokenizer-fetch-timeout to serve one; text, Chat and stop strings are unavailable until one joins",
			"model", name, "timeout", cfg.FetchTimeout)
		return modeltable.Text{FromWorkers: true}
	}
	m, w, err := tokenizerFromWorkers(ctx, cfg, src.ChatTemplatePath, g.Server.Models().Workers(g.Registry, name), g.log)
	if err != nil {
		return modeltable.Text{FromWorkers: true, Err: err}
	}
	if m == nil {
		hint := "give --model-path or --tokenizer-path"
		if name != "" {
			hint = "give --model-path " + name + "=PATH"
		}
		g.log.Warn("no tokenizer: text, Chat and stop strings are unavailable; "+hint, "model", name)
		return modeltable.Text{FromWorkers: true}
	}
	g.log.Info("tokenizer loaded from worker", "model", name, "worker", w.URL(), "vocab_size", m.Tokenizer().VocabSize(),
		"chat_template", m.TemplateSource())
	return modeltable.Text{Model: m, Source: "worker " + w.URL(), FromWorkers: true}
}

// textSources are where a model's tokenizer and chat template are: its own
// entry (--model-path MODEL=PATH, --model-config), else the router-wide
// paths.
func (cfg Config) textSources(name string) textmodel.Sources {
	if src, own := cfg.ModelTexts[name]; own {
		return src
	}
	return cfg.TextSources
}

// sourceName says where a tokenizer was loaded from.
func sourceName(src textmodel.Sources) string {
	if src.TokenizerPath != "" {
		return src.TokenizerPath
	}
	return src.ModelPath
}

// tokenizerFromWorkers asks the connected workers of ws for their tokenizer
// (GetTokenizer), in order, and returns the first one served with the worker
// that served it, its chat template overridden by the file template when
// set; nil when none serves one. An archive that cannot be loaded is an
// error: the workers serve a tokenizer kvgate cannot read.
func tokenizerFromWorkers(ctx context.Context, cfg Config, template string, ws []*workers.Worker, log *slog.Logger) (*textmodel.Model, *workers.Worker, error) {
	for _, w := range ws {
		if !w.Connected() {
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, cfg.FetchTimeout)
		archive, err := w.Backend().Tokenizer(fctx)
		cancel()
		if err != nil {
			log.Info("worker serves no tokenizer", "worker", w.URL(), "model", w.Info().Model, "error", err)
			continue
		}
		m, err := textmodel.FromArchive(archive, template, cfg.TextOptions)
		if err != nil {
			return nil, nil, fmt.Errorf("tokenizer from worker %s: %w", w.URL(), err)
		}
		return m, w, nil
	}
	return nil, nil, nil
}

// fetchTextOnJoin gives a model that has no tokenizer, and no path to load
// one from, the tokenizer of an engine that joins later (GetTokenizer).
// Without it a router started before its engines (a sidecar beside an engine
// still loading its model) would answer text and Chat with
// FAILED_PRECONDITION until restarted. Each join (a worker connecting, or one
// added) asks the connected workers of such models again, until one serves
// a tokenizer that fits them. It returns the function that tells it a
// worker joined.
func (g *Router) fetchTextOnJoin(cfg Config) (joined func()) {
	kick := make(chan struct{}, 1)
	joined = func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	bg := g.bgCtx
	g.bg.Go(func() {
		for {
			select {
			case <-kick:
			case <-bg.Done():
				return
			}
			for _, m := range g.Server.Models().All() {
				if m.TextFromWorkers && !m.TextLoading {
					g.loadJoinedText(bg, cfg, m.Name)
				}
			}
		}
	})
	return joined
}

// loadJoinedText tries the connected workers of a model for its tokenizer
// and serves it.
func (g *Router) loadJoinedText(ctx context.Context, cfg Config, name string) {
	m, w, err := tokenizerFromWorkers(ctx, cfg, cfg.textSources(name).ChatTemplatePath, g.Server.Models().Workers(g.Registry, name), g.log)
	if err != nil {
		g.log.Error("a worker's tokenizer cannot be loaded; text, Chat and stop strings stay unavailable", "model", name, "error", err)
		return
	}
	if m == nil {
		return
	}
	if err := g.vocab.arm(name, m); err != nil {
		g.log.Error("the tokenizer a worker served does not fit the workers; text, Chat and stop strings stay unavailable",
			"model", name, "worker", w.URL(), "error", err)
		if err := g.vocab.arm(name, nil); err != nil {
			g.log.Error("the workers disagree", "model", name, "error", err)
		}
		return
	}
	if err := g.Server.Models().SetText(name, modeltable.Text{Model: m, Source: "worker " + w.URL(), FromWorkers: true}); err != nil {
		g.log.Error("the model cannot be served", "model", name, "error", err)
		return
	}
	g.log.Info("tokenizer loaded from a worker that joined after start-up", "model", name, "worker", w.URL(),
		"vocab_size", m.Tokenizer().VocabSize(), "chat_template", m.TemplateSource())
	g.textJoinedOnce.Do(func() { close(g.textJoined) })
}

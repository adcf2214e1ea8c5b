package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kvgate/kvgate/tokenize/textmodel"
	"github.com/kvgate/kvgate/workers"
)

// connectAll connects to every worker concurrently, retrying each until it
// answers or the start-up timeout passes: engines often start after the router.
func connectAll(ctx context.Context, reg *workers.Registry, urls []string, opts workers.ConnectOptions, timeout time.Duration, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ws := make([]*workers.Worker, len(urls))
	errs := make([]error, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() { ws[i], errs[i] = connectWithRetry(ctx, u, opts, log) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, w := range ws {
			if w != nil {
				w.Close()
			}
		}
		return err
	}
	for _, w := range ws {
		if err := reg.Add(w); err != nil {
			return err
		}
		info := w.Info()
		log.Info("worker registered", "worker", w.URL(), "protocol", w.Protocol().String(), "role", w.Role().String(),
			"model", info.Model, "vocab_size", info.VocabSize, "max_context", info.MaxContextLength, "page_size", info.PageSize)
	}
	return nil
}

func connectWithRetry(ctx context.Context, url string, opts workers.ConnectOptions, log *slog.Logger) (*workers.Worker, error) {
	if _, _, err := workers.ParseAddress(url); err != nil {
		return nil, err // no point retrying a malformed address
	}
	for attempt := 1; ; attempt++ {
		w, err := workers.Connect(ctx, url, opts)
		if err == nil {
			return w, nil
		}
		log.Warn("worker not ready", "worker", url, "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("worker %s: not reachable before the start-up timeout: %w", url, err)
		case <-time.After(time.Second):
		}
	}
}

// loadText finds the model's tokenizer: from the paths given, or else from
// the first worker that serves one. Without either, kvgate still routes
// token ids, and says in its log what text requests would need.
func loadText(ctx context.Context, cfg Config, reg *workers.Registry, log *slog.Logger) (*textmodel.Model, error) {
	src := cfg.TextSources
	if src.ModelPath != "" || src.TokenizerPath != "" {
		m, err := textmodel.Load(src, cfg.TextOptions)
		if err != nil {
			return nil, fmt.Errorf("load tokenizer: %w", err)
		}
		log.Info("tokenizer loaded", "model_path", src.ModelPath, "tokenizer_path", src.TokenizerPath,
			"vocab_size", m.Tokenizer().VocabSize(), "chat_template", m.TemplateSource())
		return m, nil
	}
	for _, w := range reg.Snapshot() {
		fctx, cancel := context.WithTimeout(ctx, cfg.FetchTimeout)
		archive, err := w.Backend().Tokenizer(fctx)
		cancel()
		if err != nil {
			log.Info("worker serves no tokenizer", "worker", w.URL(), "error", err)
			continue
		}
		m, err := textmodel.FromArchive(archive, src.ChatTemplatePath, cfg.TextOptions)
		if err != nil {
			return nil, fmt.Errorf("tokenizer from worker %s: %w", w.URL(), err)
		}
		log.Info("tokenizer loaded from worker", "worker", w.URL(), "vocab_size", m.Tokenizer().VocabSize(),
			"chat_template", m.TemplateSource())
		return m, nil
	}
	log.Warn("no tokenizer: text, Chat and stop strings are unavailable; give --model-path or --tokenizer-path")
	return nil, nil
}

package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvgate/kvgate/tokenize/cache"
	"github.com/kvgate/kvgate/tokenize/textmodel"
	"github.com/kvgate/kvgate/workers"
)

// textFlags say where the model's tokenizer and chat template come from, and
// how the tokenizer caches are sized.
type textFlags struct {
	src          textmodel.Sources
	l0Enabled    bool
	l0MaxEntries int
	l1Enabled    bool
	l1MaxMemory  int64
	fetchTimeout time.Duration
}

func (t *textFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.src.ModelPath, "model-path", "", "model directory (or tokenizer.json file) to load the tokenizer and chat template from; empty: ask the workers (GetTokenizer)")
	fs.StringVar(&t.src.TokenizerPath, "tokenizer-path", "", "tokenizer.json file or directory; overrides --model-path for the tokenizer")
	fs.StringVar(&t.src.ChatTemplatePath, "chat-template", "", "Jinja chat template file (or chat_template.json); overrides the model's")
	def := cache.DefaultConfig()
	fs.BoolVar(&t.l0Enabled, "tokenizer-cache-enable-l0", def.L0Enabled, "exact-match tokenizer cache (exact, so on by default)")
	fs.IntVar(&t.l0MaxEntries, "tokenizer-cache-l0-max-entries", def.L0MaxEntries, "entries in the L0 cache")
	fs.BoolVar(&t.l1Enabled, "tokenizer-cache-enable-l1", def.L1Enabled, "prefix tokenizer cache at special-token boundaries (exact, so on by default)")
	fs.Int64Var(&t.l1MaxMemory, "tokenizer-cache-l1-max-memory", def.L1MaxBytes, "bytes the L1 cache may hold, counting keys, ids and overhead")
	fs.DurationVar(&t.fetchTimeout, "tokenizer-fetch-timeout", 30*time.Second, "without --model-path/--tokenizer-path: how long to wait for a worker's GetTokenizer")
}

func (t *textFlags) options() textmodel.Options {
	return textmodel.Options{Cache: cache.Config{
		L0Enabled: t.l0Enabled, L0MaxEntries: t.l0MaxEntries,
		L1Enabled: t.l1Enabled, L1MaxBytes: t.l1MaxMemory,
	}}
}

// loadText finds the model's tokenizer: from the paths given, or else from
// the first worker that serves one. Without either, kvgate still routes
// token ids, and says in its log what text requests would need.
func loadText(ctx context.Context, t textFlags, reg *workers.Registry, log *slog.Logger) (*textmodel.Model, error) {
	if t.src.ModelPath != "" || t.src.TokenizerPath != "" {
		m, err := textmodel.Load(t.src, t.options())
		if err != nil {
			return nil, fmt.Errorf("load tokenizer: %w", err)
		}
		log.Info("tokenizer loaded", "model_path", t.src.ModelPath, "tokenizer_path", t.src.TokenizerPath,
			"vocab_size", m.Tokenizer().VocabSize(), "chat_template", m.TemplateSource())
		return m, nil
	}
	for _, w := range reg.Snapshot() {
		fctx, cancel := context.WithTimeout(ctx, t.fetchTimeout)
		archive, err := w.Backend().Tokenizer(fctx)
		cancel()
		if err != nil {
			log.Info("worker serves no tokenizer", "worker", w.URL(), "error", err)
			continue
		}
		m, err := textmodel.FromArchive(archive, t.src.ChatTemplatePath, t.options())
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

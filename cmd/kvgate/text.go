package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvgate/kvgate/tokenize/cache"
	"github.com/kvgate/kvgate/tokenize/hub"
	"github.com/kvgate/kvgate/tokenize/textmodel"
)

// defaultFetchTimeout bounds fetching a tokenizer, from a worker or the hub.
const defaultFetchTimeout = 30 * time.Second

// textFlags say where the model's tokenizer and chat template come from, and
// how the tokenizer caches are sized.
type textFlags struct {
	src    textmodel.Sources
	models modelPaths
	// reasoningParser is --reasoning-parser.
	reasoningParser string
	// toolCallParser is --tool-call-parser.
	toolCallParser string
	l0Enabled      bool
	l0MaxEntries   int
	l0MaxMemory    int64
	splitSpecial   bool
	l1Enabled      bool
	l1MaxMemory    int64
	fetchTimeout   time.Duration
}

func (t *textFlags) register(fs *flag.FlagSet) {
	t.models.def = &t.src.ModelPath
	fs.Var(&t.models, "model-path", "model directory (or tokenizer.json file), Hugging Face cache directory (models--org--name or one of its snapshots), or hub id org/name[@revision] (from the cache, else downloaded) to load the tokenizer and chat template from; empty: ask the workers (GetTokenizer). With --enable-igw, MODEL=PATH (repeatable) gives one model its own")
	fs.StringVar(&t.src.TokenizerPath, "tokenizer-path", "", "tokenizer.json file, directory, Hugging Face cache directory or hub id, as --model-path; overrides --model-path for the tokenizer")
	fs.StringVar(&t.reasoningParser, "reasoning-parser", "auto", "Chat: how answers' reasoning is split from their content (reasoning_content): auto (<think> blocks when the chat template writes <think>, or without a template when the vocabulary has <think> and </think>), none (raw text), qwen3 or deepseek_r1; a request's reasoning_parser overrides it")
	fs.StringVar(&t.toolCallParser, "tool-call-parser", "auto", "Chat with tools: how tool calls are found in answers (tool_calls on chunks and completion): auto (the format whose markers the chat template writes), none (raw text), hermes (also Qwen2.5/Qwen3), llama3, mistral, deepseek_v3 or harmony (gpt-oss); a request's tool_call_parser overrides it")
	fs.StringVar(&t.src.ChatTemplatePath, "chat-template", "", "Jinja chat template file (or chat_template.json); overrides the model's")
	def := cache.DefaultConfig()
	fs.BoolVar(&t.l0Enabled, "tokenizer-cache-enable-l0", def.L0Enabled, "exact-match tokenizer cache (exact, so on by default)")
	fs.IntVar(&t.l0MaxEntries, "tokenizer-cache-l0-max-entries", def.L0MaxEntries, "entries in the L0 cache")
	fs.Int64Var(&t.l0MaxMemory, "tokenizer-cache-l0-max-memory", def.L0MaxBytes, "bytes the L0 cache may hold, counting texts, ids and overhead; a prompt over 2 MiB is never cached")
	fs.BoolVar(&t.splitSpecial, "split-special-tokens-in-content", false, "Chat: tokenize special-token text inside client strings (message content, names, tool arguments) as plain text, so a user cannot forge a turn with e.g. <|im_start|>system; off by default, as Hugging Face transformers does")
	fs.BoolVar(&t.l1Enabled, "tokenizer-cache-enable-l1", def.L1Enabled, "prefix tokenizer cache at special-token boundaries (exact, so on by default)")
	fs.Int64Var(&t.l1MaxMemory, "tokenizer-cache-l1-max-memory", def.L1MaxBytes, "bytes the L1 cache may hold, counting keys, ids and overhead")
	fs.DurationVar(&t.fetchTimeout, "tokenizer-fetch-timeout", defaultFetchTimeout, "without --model-path/--tokenizer-path: how long to wait for a worker's GetTokenizer; with a hub id: how long fetching its tokenizer files may take")
}

func (t *textFlags) options() textmodel.Options {
	c := cache.DefaultConfig()
	c.L0Enabled, c.L0MaxEntries, c.L0MaxBytes = t.l0Enabled, t.l0MaxEntries, t.l0MaxMemory
	c.L1Enabled, c.L1MaxBytes = t.l1Enabled, t.l1MaxMemory
	return textmodel.Options{Cache: c, SplitSpecialTokensInContent: t.splitSpecial}
}

// resolve turns --model-path and --tokenizer-path into local paths (see
// tokenize/hub: a hub id is read from the Hugging Face cache, else fetched
// into it), within --tokenizer-fetch-timeout so that a slow hub cannot hold
// the start-up, and logs what it chose: which snapshot serves is worth
// knowing when two routers disagree.
func (t *textFlags) resolve(ctx context.Context, hc hub.Config, log *slog.Logger) (textmodel.Sources, error) {
	src := t.src
	ctx, cancel := context.WithTimeout(ctx, t.fetchTimeout)
	defer cancel()
	hc.Logger = log
	for _, p := range []struct {
		flag string
		path *string
	}{{"--model-path", &src.ModelPath}, {"--tokenizer-path", &src.TokenizerPath}} {
		if *p.path == "" {
			continue
		}
		r, err := hc.Resolve(ctx, *p.path)
		// The deadline may surface as whatever the transport saw when it
		// cut the connection (an EOF on a body): ask the context.
		if err != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded)) {
			return src, fmt.Errorf("%s %s: %w; --tokenizer-fetch-timeout (%v) bounds the download", p.flag, *p.path, err, t.fetchTimeout)
		}
		if err != nil {
			return src, fmt.Errorf("%s %s: %w", p.flag, *p.path, err)
		}
		if r.From != "local" {
			log.Info("model files found", "flag", p.flag, "given", *p.path, "path", r.Path, "from", r.From,
				"repo", r.Repo, "revision", r.Revision, "commit", r.Commit)
		}
		*p.path = r.Path
	}
	for name, path := range t.models.byModel {
		r, err := hc.Resolve(ctx, path)
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return src, fmt.Errorf("--model-path %s=%s: %w; --tokenizer-fetch-timeout (%v) bounds the download", name, path, err, t.fetchTimeout)
		}
		if err != nil {
			return src, fmt.Errorf("--model-path %s=%s: %w", name, path, err)
		}
		t.models.byModel[name] = r.Path
	}
	return src, nil
}

// modelFlags are the text flags of a tool that takes only --model-path, with
// serve's default fetch timeout.
func modelFlags(modelPath string) *textFlags {
	t := &textFlags{fetchTimeout: defaultFetchTimeout}
	t.src.ModelPath = modelPath
	return t
}

package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --model-config is read as YAML or JSON into each model's settings, over
// the flags'; what it cannot mean is refused, naming the file and the cause.
func TestModelConfigFile(t *testing.T) {
	tests := []struct {
		name, file string
		flags      []string // besides --enable-igw and --worker-urls
		check      func(t *testing.T, c serveConfig)
		says       string // the error; "" for none
	}{
		{name: "yaml", file: "models:\n  alpha:\n    policy: round_robin\n    cache_threshold: 0\n    chat_template: /t/alpha.jinja\n  beta:\n    balance_abs_threshold: 8\n",
			check: func(t *testing.T, c serveConfig) {
				g, stop, err := c.routerConfig(slog.New(slog.DiscardHandler))
				defer stop()
				if err != nil {
					t.Fatal(err)
				}
				a, b := g.Models["alpha"], g.Models["beta"]
				if a.Policy != "round_robin" || a.CacheThreshold == nil || *a.CacheThreshold != 0 || a.BalanceAbsThreshold != nil {
					t.Errorf("alpha: %+v", a)
				}
				if b.Policy != "" || b.BalanceAbsThreshold == nil || *b.BalanceAbsThreshold != 8 {
					t.Errorf("beta: %+v", b)
				}
				if src := g.ModelTexts["alpha"]; src.ChatTemplatePath != "/t/alpha.jinja" {
					t.Errorf("alpha's text: %+v", src)
				}
				if _, ok := g.ModelTexts["beta"]; ok {
					t.Errorf("beta has text sources of its own: %+v", g.ModelTexts["beta"])
				}
			}},
		{name: "json with a model path", file: `{"models": {"alpha": {"model_path": "/models/alpha", "tokenizer_path": "/models/alpha/tokenizer.json"}}}`,
			check: func(t *testing.T, c serveConfig) {
				if p := c.text.models.byModel["alpha"]; p != "/models/alpha" {
					t.Errorf("alpha's model path %q, want it among --model-path's", p)
				}
				g, stop, err := c.routerConfig(slog.New(slog.DiscardHandler))
				defer stop()
				if err != nil {
					t.Fatal(err)
				}
				if src := g.ModelTexts["alpha"]; src.ModelPath != "/models/alpha" || src.TokenizerPath != "/models/alpha/tokenizer.json" {
					t.Errorf("alpha's text: %+v", src)
				}
			}},
		{name: "unknown key", file: "models:\n  alpha:\n    cache_treshold: 0.5\n", says: "cache_treshold"},
		{name: "no models", file: "models: {}\n", says: "no models"},
		{name: "a path given twice", file: "models:\n  alpha:\n    model_path: /b\n", flags: []string{"--model-path", "alpha=/a"}, says: "given by --model-path"},
		{name: "without --enable-igw", file: "models:\n  alpha:\n    policy: round_robin\n", says: "--enable-igw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "models")
			if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"--worker-urls", "grpc://127.0.0.1:1", "--model-config", path}, tt.flags...)
			if tt.name != "without --enable-igw" {
				args = append(args, "--enable-igw")
			}
			c := defaults(t, args...)
			err := c.readModelConfig()
			if tt.says != "" {
				if err == nil || !strings.Contains(err.Error(), tt.says) {
					t.Fatalf("error %v, want one saying %s", err, tt.says)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

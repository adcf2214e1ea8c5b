package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/tokenize/hub"
)

const cachedCommit = "c0ffeec0ffeec0ffeec0ffeec0ffeec0ffeec0ff"

// hfCache writes a Hugging Face cache holding org/model at main: the
// simulated engine's tokenizer, as huggingface_hub lays it out.
func hfCache(t *testing.T) (cache, snapshot string) {
	t.Helper()
	cache = t.TempDir()
	repo := filepath.Join(cache, "models--org--model")
	snapshot = filepath.Join(repo, "snapshots", cachedCommit)
	for _, dir := range []string{filepath.Join(repo, "blobs"), snapshot, filepath.Join(repo, "refs")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(simTokenizer, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, "blobs", "blob-"+name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../blobs/blob-"+name, filepath.Join(snapshot, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(cachedCommit), 0o644); err != nil {
		t.Fatal(err)
	}
	return cache, snapshot
}

func TestModelFlagsResolveHubIDs(t *testing.T) {
	cache, snap := hfCache(t)
	tests := []struct {
		name                     string
		modelPath, tokenizerPath string
		wantModel, wantTokenizer string
		wantErr                  []string
	}{
		{name: "hub id", modelPath: "org/model", wantModel: snap},
		{name: "hub id at a commit, for the tokenizer", modelPath: simTokenizer, tokenizerPath: "org/model@" + cachedCommit,
			wantModel: simTokenizer, wantTokenizer: snap},
		{name: "cache repository directory", modelPath: filepath.Join(cache, "models--org--model"), wantModel: snap},
		{name: "local directory", modelPath: simTokenizer, wantModel: simTokenizer},
		{name: "hub id not cached, offline", modelPath: "org/other", wantErr: []string{"--model-path org/other", "HF_HUB_OFFLINE", "hf download org/other"}},
		{name: "neither", tokenizerPath: "/no/such/dir", wantErr: []string{"--tokenizer-path /no/such/dir", "not a Hugging Face hub id"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tf := textFlags{fetchTimeout: 5 * time.Second}
			tf.src.ModelPath, tf.src.TokenizerPath = tc.modelPath, tc.tokenizerPath
			src, err := tf.resolve(context.Background(), hub.Config{CacheDir: cache, Endpoint: "https://127.0.0.1:1", Offline: true},
				slog.New(slog.DiscardHandler))
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("resolved to %+v", src)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if src.ModelPath != tc.wantModel || src.TokenizerPath != tc.wantTokenizer {
				t.Errorf("resolved to %q and %q; want %q and %q", src.ModelPath, src.TokenizerPath, tc.wantModel, tc.wantTokenizer)
			}
		})
	}
}

// kvgate serve reads the Hugging Face cache the environment names: a hub
// id in it starts the router without network; one not in it, offline, stops
// the start with what to do.
func TestServeReadsAHubIDFromTheCache(t *testing.T) {
	cache, _ := hfCache(t)
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_HUB_OFFLINE", "1")
	t.Setenv("HF_TOKEN", "")

	err := run(context.Background(), []string{"serve", "--port", "0", "--prometheus-port", "-1", "--model-path", "org/absent"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "HF_HUB_OFFLINE is set") {
		t.Fatalf("serve --model-path org/absent: %v; want the offline refusal", err)
	}

	// kvgate chat-template reads the same cache.
	msgs := filepath.Join(t.TempDir(), "messages.json")
	if err := os.WriteFile(msgs, []byte(`[{"role": "user", "content": "hi"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := runChatTemplate([]string{"--model-path", "org/model", "--messages", msgs}, &out, io.Discard); err != nil ||
		!strings.HasPrefix(out.String(), "<|im_start|>user\nhi") {
		t.Fatalf("chat-template --model-path org/model: %q, %v", out.String(), err)
	}

	cfg := defaults(t, "--port", "0", "--prometheus-port", "-1", "--embedded-time-scale", "0", "--model-path", "org/model")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.DiscardHandler), func(listening) { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve --model-path org/model: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not become ready")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve returned %v after shutdown", err)
	}
}

// A hub that does not answer holds the start-up no longer than
// --tokenizer-fetch-timeout, and the error names the flag.
func TestModelFlagsBoundTheDownload(t *testing.T) {
	stalled := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer stalled.Close()
	tf := textFlags{fetchTimeout: 200 * time.Millisecond}
	tf.src.ModelPath = "org/model"
	began := time.Now()
	_, err := tf.resolve(context.Background(), hub.Config{CacheDir: t.TempDir(), Endpoint: stalled.URL, Client: stalled.Client()},
		slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "--tokenizer-fetch-timeout (200ms)") {
		t.Fatalf("error %v; want one naming --tokenizer-fetch-timeout", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("resolution took %v", d)
	}
}

package textmodel_test

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/tokenize/cache"
	"github.com/kvgate/kvgate/tokenize/template"
	"github.com/kvgate/kvgate/tokenize/textmodel"
)

// simTokenizer is the simulated engine's built-in tokenizer, committed in the repo.
const simTokenizer = "../../workers/sim/tokenizer"

func readSim(t *testing.T) (tok, cfg []byte) {
	t.Helper()
	tok, err := os.ReadFile(filepath.Join(simTokenizer, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err = os.ReadFile(filepath.Join(simTokenizer, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	return tok, cfg
}

// modelDir writes a model directory with the built-in tokenizer and the
// given extra files, and a tokenizer_config.json whose chat_template is "config".
func modelDir(t *testing.T, extra map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	tok, cfg := readSim(t)
	var c map[string]any
	if err := json.Unmarshal(cfg, &c); err != nil {
		t.Fatal(err)
	}
	c["chat_template"] = "config"
	cfg, _ = json.Marshal(c)
	files := map[string]string{"tokenizer.json": string(tok), "tokenizer_config.json": string(cfg)}
	for k, v := range extra {
		files[k] = v
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func render(t *testing.T, m *textmodel.Model) string {
	t.Helper()
	out, err := m.Render(textmodel.Conversation{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTemplateDiscoveryOrder follows SMG's order: --chat-template, then
// chat_template.json, chat_template.jinja, any .jinja, tokenizer_config.json.
func TestTemplateDiscoveryOrder(t *testing.T) {
	explicit := filepath.Join(t.TempDir(), "mine.jinja")
	if err := os.WriteFile(explicit, []byte("explicit"), 0o644); err != nil {
		t.Fatal(err)
	}
	explicitJSON := filepath.Join(t.TempDir(), "mine.json")
	if err := os.WriteFile(explicitJSON, []byte(`{"chat_template": "explicit json"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	all := map[string]string{
		"chat_template.json":  `{"chat_template": "json"}`,
		"chat_template.jinja": "jinja",
		"b.jinja":             "other b",
		"a.jinja":             "other a",
	}
	without := func(keys ...string) map[string]string {
		m := map[string]string{}
		for k, v := range all {
			m[k] = v
		}
		for _, k := range keys {
			delete(m, k)
		}
		return m
	}
	tests := []struct {
		name     string
		files    map[string]string
		explicit string
		want     string
	}{
		{"--chat-template wins", all, explicit, "explicit"},
		{"--chat-template as chat_template.json", all, explicitJSON, "explicit json"},
		{"chat_template.json", all, "", "json"},
		{"chat_template.jinja", without("chat_template.json"), "", "jinja"},
		{"any .jinja, by name", without("chat_template.json", "chat_template.jinja"), "", "other a"},
		{"tokenizer_config.json", map[string]string{}, "", "config"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := modelDir(t, tc.files)
			m, err := textmodel.Load(textmodel.Sources{ModelPath: dir, ChatTemplatePath: tc.explicit}, textmodel.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := render(t, m); got != tc.want {
				t.Fatalf("rendered %q (from %s), want %q", got, m.TemplateSource(), tc.want)
			}
		})
	}
}

func TestLoadSources(t *testing.T) {
	dir := modelDir(t, nil)
	tokFile := filepath.Join(dir, "tokenizer.json")
	other := modelDir(t, map[string]string{"chat_template.jinja": "from the model dir"})
	tests := []struct {
		name string
		src  textmodel.Sources
		want string // rendered template
	}{
		{"model directory", textmodel.Sources{ModelPath: dir}, "config"},
		{"tokenizer.json file (its config beside it)", textmodel.Sources{ModelPath: tokFile}, "config"},
		{"tokenizer path overrides, template from the model", textmodel.Sources{ModelPath: other, TokenizerPath: tokFile}, "from the model dir"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := textmodel.Load(tc.src, textmodel.Options{Cache: cache.DefaultConfig()})
			if err != nil {
				t.Fatal(err)
			}
			if got := render(t, m); got != tc.want {
				t.Fatalf("rendered %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := textmodel.Load(textmodel.Sources{ModelPath: t.TempDir()}, textmodel.Options{}); err == nil ||
		!strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("empty directory: err = %v, want one naming tokenizer.json", err)
	}
}

func TestFromArchiveRendersAndEncodesThroughTheCache(t *testing.T) {
	tok, cfg := readSim(t)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, b := range map[string][]byte{"tokenizer.json": tok, "tokenizer_config.json": cfg} {
		w, _ := zw.Create(name)
		w.Write(b)
	}
	zw.Close()
	m, err := textmodel.FromArchive(buf.Bytes(), "", textmodel.Options{Cache: cache.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	msg := template.NewOrderedMap()
	msg.Set("role", "user")
	msg.Set("content", "hello")
	kw := template.NewOrderedMap()
	kw.Set("add_generation_prompt", false) // kwargs override the request's flag, as in transformers
	out, err := m.Render(textmodel.Conversation{Messages: []any{msg}, AddGenerationPrompt: true, Kwargs: kw})
	if err != nil {
		t.Fatal(err)
	}
	if want := "<|im_start|>user\nhello<|im_end|>\n"; out != want {
		t.Fatalf("rendered %q, want %q", out, want)
	}
	direct, err := m.Tokenizer().Encode(out, false)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // a miss, then a hit
		ids, err := m.Encode(out, false)
		if err != nil || !equal(ids, direct) {
			t.Fatalf("cached encode %v, %v; want %v", ids, err, direct)
		}
	}
	if s := m.CacheStats(); s.L0Hits != 1 {
		t.Errorf("cache stats %+v, want one L0 hit", s)
	}
}

func TestNoChatTemplate(t *testing.T) {
	tok, _ := readSim(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := textmodel.Load(textmodel.Sources{ModelPath: dir}, textmodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if m.HasChatTemplate() {
		t.Fatal("a model with no template reports one")
	}
	if _, err := m.Render(textmodel.Conversation{}); !errors.Is(err, textmodel.ErrNoChatTemplate) {
		t.Fatalf("Render: %v, want ErrNoChatTemplate", err)
	}
}

func equal(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestEncodeDeferredCachesOnlyCommitted: a request tokenized but never
// committed (because validation rejected it) leaves nothing in the caches;
// Encode commits.
func TestEncodeDeferredCachesOnlyCommitted(t *testing.T) {
	m, err := textmodel.Load(textmodel.Sources{ModelPath: modelDir(t, nil)}, textmodel.Options{Cache: cache.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	const rejected, accepted = "<|im_start|>user\nfar too long<|im_end|>\n", "<|im_start|>user\nfine<|im_end|>\n"
	for range 3 {
		ids, commit, err := m.EncodeDeferred(rejected, false)
		if err != nil || len(ids) == 0 || commit == nil {
			t.Fatalf("EncodeDeferred = %v, %v, commit nil: %v", ids, err, commit == nil)
		}
	}
	if s := m.CacheStats(); s.L0Entries != 0 || s.L1Entries != 0 || s.L0Hits != 0 {
		t.Fatalf("uncommitted encodings were cached: %+v", s)
	}
	if _, err := m.Encode(accepted, false); err != nil {
		t.Fatal(err)
	}
	if s := m.CacheStats(); s.L0Entries != 1 {
		t.Fatalf("Encode did not cache: %+v", s)
	}
}

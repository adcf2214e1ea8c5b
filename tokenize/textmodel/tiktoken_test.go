package textmodel_test

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/tokenize/cache"
	"github.com/kvgate/kvgate/tokenize/detok"
	"github.com/kvgate/kvgate/tokenize/textmodel"
)

// llama3Tiktoken is Llama 3's original tiktoken.model beside its tokenizer_config.json
// (fetched by make testdata): the same tokenizer as llama3's tokenizer.json, in the
// layout Kimi K2 ships.
func llama3Tiktoken(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(testTokenizers, "llama3_tiktoken")
	if _, err := os.Stat(filepath.Join(dir, "tiktoken.model")); err != nil {
		t.Skipf("llama3_tiktoken is missing (run make testdata): %v", err)
	}
	return dir
}

// TestTiktokenSources: every way of giving a tiktoken tokenizer (directory, file,
// --tokenizer-path beside a --model-path, GetTokenizer archive) serves the same chat
// prompt ids as the converted tokenizer.json, through the caches and the template, and
// streams them back to the same text.
func TestTiktokenSources(t *testing.T) {
	dir := llama3Tiktoken(t)
	opts := textmodel.Options{Cache: cache.DefaultConfig()}
	ref := loadReal(t, "llama3", false)
	c := conv(t, `[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "héllo <|eot_id|> 12345 世界"}]`, true)
	want, _, err := ref.EncodeChat(c)
	if err != nil {
		t.Fatal(err)
	}
	archive := func(t *testing.T) []byte {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		for _, name := range []string{"tiktoken.model", "tokenizer_config.json"} {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			w, _ := zw.Create("model/" + name)
			w.Write(b)
		}
		zw.Close()
		return buf.Bytes()
	}
	tests := []struct {
		name string
		load func(t *testing.T) (*textmodel.Model, error)
	}{
		{"model directory", func(t *testing.T) (*textmodel.Model, error) {
			return textmodel.Load(textmodel.Sources{ModelPath: dir}, opts)
		}},
		{"tiktoken.model file", func(t *testing.T) (*textmodel.Model, error) {
			return textmodel.Load(textmodel.Sources{ModelPath: filepath.Join(dir, "tiktoken.model")}, opts)
		}},
		{"tokenizer path beside a model path", func(t *testing.T) (*textmodel.Model, error) {
			model := t.TempDir()
			cfg, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(model, "tokenizer_config.json"), cfg, 0o644); err != nil {
				t.Fatal(err)
			}
			return textmodel.Load(textmodel.Sources{ModelPath: model, TokenizerPath: filepath.Join(dir, "tiktoken.model")}, opts)
		}},
		{"archive", func(t *testing.T) (*textmodel.Model, error) {
			return textmodel.FromArchive(archive(t), "", opts)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tc.load(t)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // a cache miss, then a hit
				got, _, err := m.EncodeChat(c)
				if err != nil || !equal(got, want) {
					t.Fatalf("EncodeChat = %v, %v; want the tokenizer.json's %v", got, err, want)
				}
			}
			text, err := ref.Tokenizer().Decode(want, false)
			if err != nil {
				t.Fatal(err)
			}
			st := m.NewStream(detok.Options{})
			var sb strings.Builder
			for _, id := range want {
				delta, _, err := st.Push([]uint32{id})
				if err != nil {
					t.Fatal(err)
				}
				sb.WriteString(delta)
			}
			sb.WriteString(st.Finish())
			if sb.String() != text {
				t.Errorf("streamed %q, want %q", sb.String(), text)
			}
		})
	}
}

func TestTiktokenSourceErrors(t *testing.T) {
	ranks := []byte("YQ== 0\n")
	tests := []struct {
		name    string
		files   map[string][]byte
		wantErr string
	}{
		{"two encodings", map[string][]byte{"cl100k_base.tiktoken": ranks, "o200k_base.tiktoken": ranks}, "several tiktoken files"},
		{"no tokenizer", map[string][]byte{"tokenizer_config.json": []byte(`{}`)}, "no tokenizer.json, tiktoken.model or *.tiktoken"},
		{"bad ranks", map[string][]byte{"tiktoken.model": ranks}, "tiktoken.model: tiktoken ranks: byte 0x00 is not a token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, b := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := textmodel.Load(textmodel.Sources{ModelPath: dir}, textmodel.Options{Cache: cache.DefaultConfig()})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

package tokenize

import (
	"encoding/json"
	"fmt"
	"github.com/kvgate/kvgate/internal/testutil"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// The golden files come from the Hugging Face reference (tokenizers, Node binding) run
// over the corpus by `make testdata`; the tokenizer files are fetched by the same step.
// TOKENIZE_TESTDATA overrides the folder (same layout), for development.

var goldenTokenizers = []string{"llama3", "qwen3", "deepseek_v3", "llama2", "gemma3", "bert_uncased", "albert", "albert_cased"}

func testdataDir() string {
	if d := os.Getenv("TOKENIZE_TESTDATA"); d != "" {
		return d
	}
	return "testdata"
}

type goldenCase struct {
	Name              string   `json:"name"`
	Text              string   `json:"text"`
	WithSpecial       []uint32 `json:"with_special"`
	WithoutSpecial    []uint32 `json:"without_special"`
	Decode            string   `json:"decode"`
	DecodeSkipSpecial string   `json:"decode_skip_special"`
}

type goldenFile struct {
	Tokenizer string       `json:"tokenizer"`
	Cases     []goldenCase `json:"cases"`
}

var (
	loadedMu sync.Mutex
	loaded   = map[string]*Tokenizer{}
)

// loadTestTokenizer loads a golden tokenizer once per test binary; a missing file fails
// the test (never skips it).
func loadTestTokenizer(tb testing.TB, name string) *Tokenizer {
	tb.Helper()
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if t, ok := loaded[name]; ok {
		return t
	}
	dir := filepath.Join(testdataDir(), "tokenizers", name)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		tb.Fatalf("tokenizer %s is missing (%v): run make testdata", name, err)
	}
	t, err := Load(dir)
	if err != nil {
		tb.Fatalf("load %s: %v", name, err)
	}
	loaded[name] = t
	return t
}

func loadGolden(tb testing.TB, name string) goldenFile {
	tb.Helper()
	path := filepath.Join(testdataDir(), "golden", name+".json")
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("golden file %s is missing (%v): run make testdata", path, err)
	}
	var g goldenFile
	if err := json.Unmarshal(b, &g); err != nil {
		tb.Fatalf("golden file %s: %v", path, err)
	}
	if len(g.Cases) == 0 {
		tb.Fatalf("golden file %s has no cases: run make testdata", path)
	}
	return g
}

func firstStringDiff(got, want string) string {
	n := min(len(got), len(want))
	i := 0
	for i < n && got[i] == want[i] {
		i++
	}
	clip := func(s string) string {
		lo, hi := max(0, i-10), min(len(s), i+20)
		return fmt.Sprintf("%q", s[lo:hi])
	}
	return fmt.Sprintf("first difference at byte %d: got …%s…, want …%s…", i, clip(got), clip(want))
}

// parityCounts are the cases passing each of the four checks.
type parityCounts struct{ with, without, decode, decodeSkip, total int }

func checkParity(t *testing.T, name string) parityCounts {
	tok := loadTestTokenizer(t, name)
	g := loadGolden(t, name)
	var c parityCounts
	c.total = len(g.Cases)
	for _, tc := range g.Cases {
		got, err := tok.Encode(tc.Text, true)
		switch {
		case err != nil:
			t.Errorf("%s/%s: Encode(with special): %v", name, tc.Name, err)
		case !slices.Equal(got, tc.WithSpecial):
			t.Errorf("%s/%s: Encode(with special): %s", name, tc.Name, testutil.FirstDiff(got, tc.WithSpecial))
		default:
			c.with++
		}
		got, err = tok.Encode(tc.Text, false)
		switch {
		case err != nil:
			t.Errorf("%s/%s: Encode(without special): %v", name, tc.Name, err)
		case !slices.Equal(got, tc.WithoutSpecial):
			t.Errorf("%s/%s: Encode(without special): %s", name, tc.Name, testutil.FirstDiff(got, tc.WithoutSpecial))
		default:
			c.without++
		}
		for _, skip := range []bool{false, true} {
			want := tc.Decode
			if skip {
				want = tc.DecodeSkipSpecial
			}
			s, err := tok.Decode(tc.WithSpecial, skip)
			switch {
			case err != nil:
				t.Errorf("%s/%s: Decode(skip=%v): %v", name, tc.Name, skip, err)
			case s != want:
				t.Errorf("%s/%s: Decode(skip=%v): %s", name, tc.Name, skip, firstStringDiff(s, want))
			case skip:
				c.decodeSkip++
			default:
				c.decode++
			}
		}
	}
	return c
}

func TestParity(t *testing.T) {
	for _, name := range goldenTokenizers {
		t.Run(name, func(t *testing.T) {
			c := checkParity(t, name)
			t.Logf("%s: encode+special %d/%d, encode %d/%d, decode %d/%d, decode skip %d/%d",
				name, c.with, c.total, c.without, c.total, c.decode, c.total, c.decodeSkip, c.total)
		})
	}
}

// Package goldentok loads the five real tokenizers the parity tests use
// (fetched by `make testdata` into tokenize/testdata/tokenizers/), once per
// test binary, for the tests of the packages built on the tokenizer.
package goldentok

import (
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/kvgate/kvgate/tokenize"
)

// Names are the golden tokenizers, in the order tests report them.
var Names = []string{"llama3", "qwen3", "deepseek_v3", "llama2", "gemma3"}

var (
	mu     sync.Mutex
	loaded = map[string]*tokenize.Tokenizer{}
)

// Dir is tokenize/testdata, found from this file so any package's test can
// call it.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata")
}

// Load returns the named golden tokenizer, failing the test (not skipping it)
// when the files are missing.
func Load(tb testing.TB, name string) *tokenize.Tokenizer {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	if tk, ok := loaded[name]; ok {
		return tk
	}
	path := filepath.Join(Dir(), "tokenizers", name, "tokenizer.json")
	if _, err := os.Stat(path); err != nil {
		tb.Fatalf("tokenizer %s missing (%v): run make testdata", name, err)
	}
	tk, err := tokenize.Load(path)
	if err != nil {
		tb.Fatalf("load %s: %v", name, err)
	}
	loaded[name] = tk
	return tk
}

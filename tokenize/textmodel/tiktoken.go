package textmodel

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kvgate/kvgate/tokenize"
)

// A model's tokenizer is its tokenizer.json, or, for models that ship tiktoken rank
// files instead (Kimi K2, Llama 3's original checkpoint, OpenAI's encodings), a
// tiktoken.model or <encoding>.tiktoken file; tokenize.FromTiktoken reads the pattern
// and special tokens that go with it.

// singleFileKey is the name under which a tokenizer given as one file is kept: its own
// name for a tiktoken file (which decides how it is read), else tokenizer.json.
func singleFileKey(path string) string {
	if base := filepath.Base(path); tokenize.IsTiktokenFile(base) {
		return base
	}
	return "tokenizer.json"
}

// hasTokenizer reports whether fl holds a tokenizer file of any kind.
func hasTokenizer(fl files) bool {
	if _, ok := fl["tokenizer.json"]; ok {
		return true
	}
	for name := range fl {
		if tokenize.IsTiktokenFile(name) {
			return true
		}
	}
	return false
}

// newTokenizer builds the tokenizer of fl: tokenizer.json when present, else its
// tiktoken.model, else its only *.tiktoken file, as tokenize.Load chooses on disk.
func newTokenizer(fl files) (*tokenize.Tokenizer, error) {
	config := fl["tokenizer_config.json"]
	if tj, ok := fl["tokenizer.json"]; ok {
		tok, err := tokenize.FromJSON(tj, config)
		if err != nil {
			return nil, fmt.Errorf("tokenizer.json: %w", err)
		}
		return tok, nil
	}
	name := tokenize.TiktokenModelFile
	if _, ok := fl[name]; !ok {
		var found []string
		for n := range fl {
			if strings.HasSuffix(n, ".tiktoken") {
				found = append(found, n)
			}
		}
		sort.Strings(found)
		switch len(found) {
		case 0:
			return nil, errors.New("no tokenizer.json, tiktoken.model or *.tiktoken among the tokenizer files")
		case 1:
			name = found[0]
		default:
			return nil, fmt.Errorf("several tiktoken files (%s) and no tokenizer.json: give one with --tokenizer-path", strings.Join(found, ", "))
		}
	}
	// FromTiktoken's errors name the file.
	return tokenize.FromTiktoken(name, fl[name], config)
}

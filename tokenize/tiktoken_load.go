package tokenize

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Patterns of the tiktoken encodings and models. A rank file does not carry its pattern:
// tiktoken registers one per encoding name, and a model ships it in its tokenizer code.
const (
	// patCL100k is cl100k_base's pattern; it is also Llama 3's, character for character.
	patCL100k = patLlama3
	patO200k  = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|` +
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|` +
		`\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patKimi is Kimi K2's pat_str (tokenization_kimi.py): o200k's shape, with Han runs
	// split off first, Han taken out of the letter classes (&& is a class intersection in
	// the Rust regex syntax tiktoken uses) and no "/" in the punctuation tail.
	patKimi = `[\p{Han}]+|` +
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|` +
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|` +
		`\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// TiktokenModelFile is the file name of a model directory's tiktoken rank file.
const TiktokenModelFile = "tiktoken.model"

// tiktokenEncoding returns the pattern and special tokens tiktoken registers for an
// encoding name (tiktoken_ext/openai_public), ok false for a name it does not know.
func tiktokenEncoding(name string) (tiktokenSpec, bool) {
	switch name {
	case "cl100k_base":
		return tiktokenSpec{pattern: patCL100k, special: map[string]uint32{
			"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
			"<|fim_suffix|>": 100260, "<|endofprompt|>": 100276,
		}}, true
	case "o200k_base":
		return tiktokenSpec{pattern: patO200k, special: map[string]uint32{
			"<|endoftext|>": 199999, "<|endofprompt|>": 200018,
		}}, true
	}
	return tiktokenSpec{}, false
}

// reservedSpecialTokens is how many ids past the last rank a tiktoken.model model
// reserves for special tokens (Llama 3 and Kimi K2: num_reserved_special_tokens = 256).
const reservedSpecialTokens = 256

// tiktokenModelSpec reads a tiktoken.model directory's spec from its
// tokenizer_config.json, as the models' own tokenizer code does:
//
//   - special tokens: added_tokens_decoder (id → content); an id of the reserved block
//     after the last rank without an entry is named <|reserved_token_ID|> (Kimi K2's
//     tokenization_kimi.py; Llama 3's config lists all 256, so it gets none);
//   - pattern: Kimi K2's when auto_map names its tokenization_kimi module, else
//     cl100k_base's, which Meta's Llama 3 tokenizer.py and transformers'
//     TikTokenConverter use. The pattern lives in each model's Python code, not in a data
//     file, so another model with another pattern needs an entry here.
func tiktokenModelSpec(config []byte, ranks int) (tiktokenSpec, error) {
	var cfg struct {
		AddedTokensDecoder map[string]struct {
			Content string `json:"content"`
		} `json:"added_tokens_decoder"`
		AutoMap json.RawMessage `json:"auto_map"`
	}
	if len(config) > 0 {
		if err := json.Unmarshal(config, &cfg); err != nil {
			return tiktokenSpec{}, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	spec := tiktokenSpec{pattern: patCL100k, special: make(map[string]uint32)}
	if strings.Contains(string(cfg.AutoMap), "tokenization_kimi") {
		spec.pattern = patKimi
	}
	taken := make(map[uint32]bool)
	for key, tok := range cfg.AddedTokensDecoder {
		id, err := strconv.ParseUint(key, 10, 31)
		if err != nil {
			return tiktokenSpec{}, fmt.Errorf("tokenizer_config.json: added_tokens_decoder key %q: %w", key, err)
		}
		if prev, ok := spec.special[tok.Content]; ok {
			return tiktokenSpec{}, fmt.Errorf("tokenizer_config.json: %q has ids %d and %d", tok.Content, prev, id)
		}
		spec.special[tok.Content] = uint32(id)
		taken[uint32(id)] = true
	}
	for id := uint32(ranks); id < uint32(ranks+reservedSpecialTokens); id++ {
		if !taken[id] {
			spec.special["<|reserved_token_"+strconv.Itoa(int(id))+"|>"] = id
		}
	}
	return spec, nil
}

// IsTiktokenFile reports whether a file name is a tiktoken rank file: tiktoken.model or
// *.tiktoken.
func IsTiktokenFile(name string) bool {
	return name == TiktokenModelFile || strings.HasSuffix(name, ".tiktoken")
}

// FromTiktoken builds a tokenizer from a tiktoken rank file's contents. name is the file's
// base name: "<encoding>.tiktoken" takes the pattern and special tokens tiktoken registers
// for that encoding (cl100k_base, o200k_base); "tiktoken.model" takes them from
// tokenizer_config.json (see tiktokenModelSpec). tokenizerConfigJSON may be nil.
func FromTiktoken(name string, ranks, tokenizerConfigJSON []byte) (*Tokenizer, error) {
	if !IsTiktokenFile(name) {
		return nil, fmt.Errorf("%s is not a tiktoken file (tiktoken.model or <encoding>.tiktoken)", name)
	}
	toks, err := parseTiktokenRanks(ranks)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var spec tiktokenSpec
	if name == TiktokenModelFile {
		n := 0
		for _, t := range toks {
			if t != "" {
				n++
			}
		}
		// n is len(mergeable_ranks), the first reserved id in the models' code.
		if spec, err = tiktokenModelSpec(tokenizerConfigJSON, n); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	} else {
		enc := strings.TrimSuffix(name, ".tiktoken")
		var ok bool
		if spec, ok = tiktokenEncoding(enc); !ok {
			return nil, fmt.Errorf("%s: unknown tiktoken encoding %q (known: cl100k_base, o200k_base): the file does not carry its pattern and special tokens", name, enc)
		}
	}
	t, err := fromTiktoken(toks, spec, tokenizerConfigJSON)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return t, nil
}

// FindTiktoken returns the tiktoken rank file of path: path itself when it is one, or,
// for a directory without tokenizer.json, its tiktoken.model or its only *.tiktoken
// file. ok is false when path is not a tiktoken tokenizer; err reports a directory
// that holds several *.tiktoken files.
func FindTiktoken(path string) (file string, ok bool, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", false, err
	}
	if !st.IsDir() {
		return path, IsTiktokenFile(filepath.Base(path)), nil
	}
	if _, err := os.Stat(filepath.Join(path, "tokenizer.json")); err == nil {
		return "", false, nil
	}
	if _, err := os.Stat(filepath.Join(path, TiktokenModelFile)); err == nil {
		return filepath.Join(path, TiktokenModelFile), true, nil
	}
	found, err := filepath.Glob(filepath.Join(path, "*.tiktoken"))
	if err != nil {
		return "", false, err
	}
	sort.Strings(found)
	switch len(found) {
	case 0:
		return "", false, nil
	case 1:
		return found[0], true, nil
	}
	return "", false, fmt.Errorf("%s holds several tiktoken files (%s): give one", path, strings.Join(found, ", "))
}

// loadTiktoken reads a tiktoken rank file and the tokenizer_config.json beside it, if any.
func loadTiktoken(file string) (*Tokenizer, error) {
	ranks, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	cj, err := os.ReadFile(filepath.Join(filepath.Dir(file), "tokenizer_config.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := FromTiktoken(filepath.Base(file), ranks, cj)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", file, err)
	}
	return t, nil
}

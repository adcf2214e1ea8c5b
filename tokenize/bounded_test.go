package tokenize

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// simTokenizerJSON is the simulated engine's byte-level BPE tokenizer (a
// Qwen-style pre-tokenizer over a 2,056-token vocabulary), the one tokenizer
// the repository carries without `make testdata`.
const simTokenizerJSON = "../workers/sim/tokenizer/tokenizer.json"

// windowedTokenizers are the simulated engine's tokenizer as it is, and with
// its pre-tokenizer replaced by each kind that allows windows: the same BPE
// model behind every pre-tokenizer family that cutSafe accepts.
func windowedTokenizers(tb testing.TB) map[string]*Tokenizer {
	tb.Helper()
	raw, err := os.ReadFile(simTokenizerJSON)
	if err != nil {
		tb.Fatal(err)
	}
	split := func(pattern, behavior string) map[string]any {
		return map[string]any{"type": "Split", "pattern": map[string]any{"Regex": pattern}, "behavior": behavior, "invert": false}
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	seq := func(steps ...any) map[string]any { return map[string]any{"type": "Sequence", "pretokenizers": steps} }
	variants := map[string]any{
		"sim":          nil, // as shipped
		"llama3":       seq(split(patLlama3, "Isolated"), byteLevel),
		"gpt2":         map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"deepseek":     seq(split(patDigits, "Isolated"), split(patCJK, "Isolated"), split(patDSWord, "Isolated"), byteLevel),
		"o200k":        seq(split(patO200k, "Isolated"), byteLevel),
		"digits-first": seq(map[string]any{"type": "Digits", "individual_digits": true}, split(patQwen, "Isolated"), byteLevel),
		"whitespace":   seq(map[string]any{"type": "Whitespace"}, byteLevel),
		"bert":         seq(map[string]any{"type": "BertPreTokenizer"}, byteLevel),
		"metaspace":    seq(map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true}, byteLevel),
		// tiktoken's way of splitting: keep only the matches.
		"o200k-matches-only": seq(map[string]any{"type": "Split", "pattern": map[string]any{"Regex": patO200k}, "behavior": "Removed", "invert": true}, byteLevel),
	}
	out := map[string]*Tokenizer{}
	for name, pre := range variants {
		b := raw
		if pre != nil {
			var spec map[string]any
			if err := json.Unmarshal(raw, &spec); err != nil {
				tb.Fatal(err)
			}
			spec["pre_tokenizer"] = pre
			if b, err = json.Marshal(spec); err != nil {
				tb.Fatal(err)
			}
		}
		tok, err := FromJSON(b, nil)
		if err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		if !tok.cutSafe {
			tb.Fatalf("%s: not windowed; the test would compare the whole text with itself", name)
		}
		out[name] = tok
	}
	// A tiktoken file's tokenizer, with a few merges over the 256 bytes.
	tik, err := fromTiktokenTest(rankFile("he", "ll", "hell", "hello", " w", "or", " wor", " world", "kv", "gate", "日本"), tiktokenSpec{pattern: patO200k})
	if err != nil {
		tb.Fatal(err)
	}
	if !tik.cutSafe {
		tb.Fatal("tiktoken o200k: not windowed")
	}
	out["tiktoken-o200k"] = tik
	return out
}

// mixedText mixes what pre-tokenizers treat differently: ASCII words and
// single spaces (where windows are cut), runs of spaces, newlines, digits,
// punctuation, contractions, accents, CJK, and the tokenizer's special tokens.
func mixedText(r *rand.Rand, n int) string {
	parts := []string{"a", "b", "Hello", "world", "kv", "gate", " ", " ", " ", "  ", "\n", "\n\n", " \n ", "\t", "0", "42", "12345",
		",", ".", "!?", "'s", "'LL", "don't", "é", "e\u0301", "日本語", "한국어", "Ωμέγα", "🙂", "<|im_start|>", "<|im_end|>", "##", "▁"}
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(parts[r.IntN(len(parts))])
	}
	return b.String()
}

// Windows are invisible: a text pre-tokenized in windows of any size gives
// exactly the ids of the whole text, for every pre-tokenizer that allows
// windows.
func TestWindowedEncodeIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for name, tok := range windowedTokenizers(t) {
		t.Run(name, func(t *testing.T) {
			for i := range 300 {
				text := mixedText(r, 1+r.IntN(400))
				add := i%2 == 0
				whole, err := tok.encodeBounded(text, add, nil, 0, math.MaxInt)
				if err != nil {
					t.Fatal(err)
				}
				window := 1 + r.IntN(48)
				got, err := tok.encodeBounded(text, add, nil, 0, window)
				if err != nil || !slices.Equal(got, whole) {
					t.Fatalf("window %d of %q:\n got %v (%v)\nwant %v", window, text, got, err, whole)
				}
				// The same with client text (literal spans) in the middle,
				// as a rendered chat prompt has.
				lit := []ByteRange{runeSpan(r, text)}
				whole, err = tok.encodeBounded(text, add, lit, 0, math.MaxInt)
				if err != nil {
					t.Fatal(err)
				}
				got, err = tok.encodeBounded(text, add, lit, 0, window)
				if err != nil || !slices.Equal(got, whole) {
					t.Fatalf("window %d of %q with literal %v:\n got %v (%v)\nwant %v", window, text, lit[0], got, err, whole)
				}
			}
		})
	}
}

// runeSpan is a random span of text that starts and ends at rune
// boundaries.
func runeSpan(r *rand.Rand, text string) ByteRange {
	a, b := r.IntN(len(text)+1), r.IntN(len(text)+1)
	if a > b {
		a, b = b, a
	}
	for a > 0 && a < len(text) && !utf8.RuneStart(text[a]) {
		a--
	}
	for b < len(text) && !utf8.RuneStart(text[b]) {
		b++
	}
	return ByteRange{a, b}
}

// EncodeLimit gives Encode's ids for a text within the limit, and
// ErrTooManyTokens for one over it, never a wrong count.
func TestEncodeLimit(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	tok := windowedTokenizers(t)["sim"]
	for range 300 {
		text := mixedText(r, 1+r.IntN(300))
		whole, err := tok.Encode(text, true)
		if err != nil {
			t.Fatal(err)
		}
		limit := 1 + r.IntN(len(whole)*2)
		got, err := tok.encodeBounded(text, true, nil, limit, 1+r.IntN(32))
		var tooMany *TooManyTokensError
		switch {
		case len(whole) <= limit && (err != nil || !slices.Equal(got, whole)):
			t.Fatalf("%d tokens, limit %d: got %v (%v), want %v", len(whole), limit, got, err, whole)
		case len(whole) > limit && (!errors.Is(err, ErrTooManyTokens) || !errors.As(err, &tooMany) || tooMany.AtLeast <= limit || tooMany.AtLeast > len(whole)):
			t.Fatalf("%d tokens, limit %d: got %d ids and %v, want ErrTooManyTokens with a count in (%d, %d]", len(whole), limit, len(got), err, limit, len(whole))
		}
	}
}

// FuzzWindowedEncode checks window invisibility on texts the fuzzer finds.
func FuzzWindowedEncode(f *testing.F) {
	f.Add("Hello world, it's kvgate 12345 日本語 \n\n  spaces  <|im_start|>user\nhi<|im_end|>", uint8(7))
	f.Add("a b c d e f g h", uint8(1))
	toks := windowedTokenizers(f)
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range toks {
			if !yield(n) {
				return
			}
		}
	})
	f.Fuzz(func(t *testing.T, text string, w uint8) {
		for _, name := range names {
			tok := toks[name]
			whole, errWhole := tok.encodeBounded(text, true, nil, 0, math.MaxInt)
			got, err := tok.encodeBounded(text, true, nil, 0, 1+int(w%64))
			if (err == nil) != (errWhole == nil) || !slices.Equal(got, whole) {
				t.Fatalf("%s, window %d of %q: got %v (%v), want %v (%v)", name, 1+w%64, text, got, err, whole, errWhole)
			}
		}
	})
}

// eightMiB is a text of the size of the largest request message by default
// (--max-request-bytes): words, spaces and newlines, as prose is.
func eightMiB() string {
	r := rand.New(rand.NewPCG(5, 6))
	words := []string{"hello", "world", "the", "a", "kvgate", "123", "!!", "\n", "naïve", "日本語"}
	var b strings.Builder
	for b.Len() < 8<<20 {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()
}

// BenchmarkEncode8MiB measures what one 8 MiB prompt costs to tokenize:
// whole (Encode, what a prompt within the context costs), with a
// 131,072-token limit (EncodeLimit, what the router does for a model of
// that context; the byte bound refuses it before pre-tokenizing), and with
// a 1,000,000-token limit, which the byte bound cannot decide, so the text
// is tokenized window by window until the count passes it. B/op is the
// figure: 869 MB per Encode before windows.
func BenchmarkEncode8MiB(b *testing.B) {
	tok := windowedTokenizers(b)["sim"]
	text := eightMiB()
	if bound := tok.minTokens(text); bound >= 1_000_000 {
		b.Fatalf("the byte bound (%d tokens) decides the 1,000,000 case too", bound)
	}
	for _, limit := range []int{0, 131_072, 1_000_000} {
		name := "whole"
		if limit > 0 {
			name = fmt.Sprintf("limit-%d", limit)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				_, err := tok.EncodeLimit(text, true, limit)
				if limit == 0 && err != nil || limit > 0 && !errors.Is(err, ErrTooManyTokens) {
					b.Fatal(err)
				}
			}
		})
	}
}

// An 8 MiB text over the limit allocates a bounded amount: far less than the
// text's whole tokenization, and less than 16 bytes per byte of text. (The
// figures are in BenchmarkEncode8MiB; this only guards the order of
// magnitude.)
func TestEncodeLimitMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("tokenizes 8 MiB")
	}
	tok := windowedTokenizers(t)["sim"]
	text := eightMiB()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := tok.EncodeLimit(text, true, 131_072)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooManyTokens) {
		t.Fatalf("8 MiB with a limit of 131,072 tokens: %v, want ErrTooManyTokens", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 16*uint64(len(text)) {
		t.Fatalf("EncodeLimit allocated %d MB for an 8 MiB text over the limit", n>>20)
	}
}

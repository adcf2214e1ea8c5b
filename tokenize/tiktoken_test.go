package tokenize

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// rankFile writes a rank file holding the 256 single bytes (ranks 0-255) followed by
// extra, in order.
func rankFile(extra ...string) []byte {
	var sb strings.Builder
	rank := 0
	add := func(tok string) {
		fmt.Fprintf(&sb, "%s %d\n", base64.StdEncoding.EncodeToString([]byte(tok)), rank)
		rank++
	}
	for b := 0; b < 256; b++ {
		add(string([]byte{byte(b)}))
	}
	for _, tok := range extra {
		add(tok)
	}
	return []byte(sb.String())
}

func TestParseTiktokenRanks(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr string
	}{
		{name: "ranks in order", in: b64("a") + " 0\n" + b64("bc") + " 1\n", want: []string{"a", "bc"}},
		{name: "blank lines and no final newline", in: "\n" + b64("a") + " 0\n\n" + b64("b") + " 1", want: []string{"a", "b"}},
		{name: "a gap stays empty", in: b64("a") + " 0\n" + b64("b") + " 2\n", want: []string{"a", "", "b"}},
		{name: "ranks out of order", in: b64("b") + " 1\n" + b64("a") + " 0\n", want: []string{"a", "b"}},
		{name: "empty", in: "\n\n", wantErr: "no tokens"},
		{name: "no rank", in: b64("a") + "\n", wantErr: "line 1"},
		{name: "bad base64", in: "!!! 0\n", wantErr: "line 1: token"},
		{name: "leading space", in: " 0\n", wantErr: "line 1"},
		{name: "negative rank", in: b64("a") + " -1\n", wantErr: "rank"},
		{name: "rank twice", in: b64("a") + " 0\n" + b64("b") + " 0\n", wantErr: "line 2: rank 0 appears twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTiktokenRanks([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("= %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// referenceMerge is tiktoken's byte_pair_merge written out plainly: start from single
// bytes and merge, while any adjacent pair's concatenation is a token, the pair whose
// concatenation has the lowest rank (the leftmost among equals). A piece that is a
// token is that token.
func referenceMerge(ranks map[string]uint32, piece string) []uint32 {
	if r, ok := ranks[piece]; ok {
		return []uint32{r}
	}
	parts := make([]string, len(piece))
	for i := range piece {
		parts[i] = piece[i : i+1]
	}
	for {
		best, bestRank := -1, uint32(0)
		for i := 0; i+1 < len(parts); i++ {
			if r, ok := ranks[parts[i]+parts[i+1]]; ok && (best < 0 || r < bestRank) {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			break
		}
		parts[best] += parts[best+1]
		parts = slices.Delete(parts, best+1, best+2)
	}
	out := make([]uint32, len(parts))
	for i, p := range parts {
		out[i] = ranks[p]
	}
	return out
}

// TestTiktokenMergeOrder compares the model with referenceMerge on random vocabularies
// over a three-letter alphabet and random words. Their tokens overlap in many ways (a
// token with several splits into tokens, tokens that no merge reaches, which only the
// whole-piece lookup finds); words longer than smallWord take the heap path.
func TestTiktokenMergeOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randomWord := func(n int) string {
		w := make([]byte, n)
		for i := range w {
			w[i] = "abc"[rng.IntN(3)]
		}
		return string(w)
	}
	for v := 0; v < 300; v++ {
		ranks := map[string]uint32{"a": 'a', "b": 'b', "c": 'c'}
		var extra []string
		for len(extra) < 16 {
			tok := randomWord(2 + rng.IntN(3))
			if _, dup := ranks[tok]; !dup {
				ranks[tok] = uint32(256 + len(extra))
				extra = append(extra, tok)
			}
		}
		tok, err := fromTiktokenTest(rankFile(extra...), tiktokenSpec{pattern: `\p{L}+`})
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < 40; n++ {
			word := randomWord(1 + rng.IntN(100))
			want := referenceMerge(ranks, word)
			got, err := tok.Encode(word, false)
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("vocabulary %q: Encode(%q) = %v, %v; tiktoken's rule gives %v", extra, word, got, err, want)
			}
		}
	}
}

func fromTiktokenTest(ranks []byte, spec tiktokenSpec) (*Tokenizer, error) {
	toks, err := parseTiktokenRanks(ranks)
	if err != nil {
		return nil, err
	}
	return fromTiktoken(toks, spec, nil)
}

func TestFromTiktokenErrors(t *testing.T) {
	tests := []struct {
		name    string
		ranks   []byte
		spec    tiktokenSpec
		wantErr string
	}{
		{name: "missing byte", ranks: []byte("YQ== 0\n"), spec: tiktokenSpec{pattern: `\w+`}, wantErr: "byte 0x00 is not a token"},
		{name: "token twice", ranks: append(rankFile(), "YQ== 300\n"...), spec: tiktokenSpec{pattern: `\w+`}, wantErr: "token \"a\" has ranks 97 and 300"},
		{name: "special on a rank", ranks: rankFile(), spec: tiktokenSpec{pattern: `\w+`, special: map[string]uint32{"<s>": 7}}, wantErr: "which is the rank of"},
		{name: "special ids shared", ranks: rankFile(), spec: tiktokenSpec{pattern: `\w+`, special: map[string]uint32{"<s>": 300, "</s>": 300}}, wantErr: "share id 300"},
		{name: "empty special", ranks: rankFile(), spec: tiktokenSpec{pattern: `\w+`, special: map[string]uint32{"": 300}}, wantErr: "empty"},
		{name: "bad pattern", ranks: rankFile(), spec: tiktokenSpec{pattern: `(`}, wantErr: "pattern"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fromTiktokenTest(tc.ranks, tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestTiktokenSpecialTokens: special tokens are cut out of the text by Encode, kept as
// text by EncodeSplitSpecialTokens, skipped on request by Decode, and counted in
// VocabSize; text no pattern alternative matches is dropped, as tiktoken drops it.
func TestTiktokenSpecialTokens(t *testing.T) {
	tok, err := fromTiktokenTest(rankFile("hi"), tiktokenSpec{pattern: `[a-z<>|]+`, special: map[string]uint32{"<|end|>": 300}})
	if err != nil {
		t.Fatal(err)
	}
	hi := uint32(256)
	tests := []struct {
		name  string
		text  string
		split bool
		want  []uint32
	}{
		{name: "special", text: "hi<|end|>hi", want: []uint32{hi, 300, hi}},
		{name: "special as text", text: "hi<|end|>", split: true, want: []uint32{hi, '<', '|', 'e', 'n', 'd', '|', '>'}},
		{name: "unmatched text dropped", text: "hi 12 hi", want: []uint32{hi, hi}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			enc := tok.Encode
			if tc.split {
				enc = tok.EncodeSplitSpecialTokens
			}
			for _, add := range []bool{false, true} {
				got, err := enc(tc.text, add)
				if err != nil || !slices.Equal(got, tc.want) {
					t.Fatalf("encode(%q, add=%v) = %v, %v; want %v", tc.text, add, got, err, tc.want)
				}
			}
		})
	}
	if got := tok.VocabSize(); got != 301 {
		t.Errorf("VocabSize = %d, want 301 (largest id + 1)", got)
	}
	if s, err := tok.Decode([]uint32{hi, 300, hi}, true); err != nil || s != "hihi" {
		t.Errorf("Decode(skip special) = %q, %v; want \"hihi\"", s, err)
	}
	if _, err := tok.Decode([]uint32{299}, false); err == nil {
		t.Error("Decode of an id between the ranks and the special tokens succeeded")
	}
	if !tok.IsSpecial(300) || tok.IsSpecial(hi) {
		t.Error("IsSpecial: want 300 special and the rank token not")
	}
	if id, ok := tok.TokenToID("<|end|>"); !ok || id != 300 {
		t.Errorf("TokenToID(<|end|>) = %d, %v", id, ok)
	}
	// Ranks are spelled byte-level, as converted tokenizer.json files spell them.
	if s, ok := tok.IDToToken(' '); !ok || s != "Ġ" {
		t.Errorf("IDToToken(' ') = %q, %v; want \"Ġ\"", s, ok)
	}
}

func TestTiktokenModelSpec(t *testing.T) {
	tests := []struct {
		name        string
		config      string
		wantPattern string
		wantSpecial map[string]uint32
		wantErr     string
	}{
		{name: "no config: cl100k pattern, reserved names", wantPattern: patCL100k,
			wantSpecial: map[string]uint32{"<|reserved_token_10|>": 10, "<|reserved_token_265|>": 265}},
		{name: "added_tokens_decoder names ids", config: `{"added_tokens_decoder": {"10": {"content": "[BOS]"}, "12": {"content": "<|im_end|>"}}}`,
			wantPattern: patCL100k, wantSpecial: map[string]uint32{"[BOS]": 10, "<|im_end|>": 12, "<|reserved_token_11|>": 11}},
		{name: "kimi auto_map", config: `{"auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", null]}}`,
			wantPattern: patKimi, wantSpecial: map[string]uint32{"<|reserved_token_10|>": 10}},
		{name: "bad id", config: `{"added_tokens_decoder": {"x": {"content": "a"}}}`, wantErr: "key \"x\""},
		{name: "content twice", config: `{"added_tokens_decoder": {"300": {"content": "a"}, "301": {"content": "a"}}}`, wantErr: "has ids"},
		{name: "not json", config: `{`, wantErr: "tokenizer_config.json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var config []byte
			if tc.config != "" {
				config = []byte(tc.config)
			}
			spec, err := tiktokenModelSpec(config, 10)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if spec.pattern != tc.wantPattern {
				t.Errorf("pattern = %q, want %q", spec.pattern, tc.wantPattern)
			}
			if len(spec.special) != reservedSpecialTokens {
				t.Errorf("%d special tokens, want %d", len(spec.special), reservedSpecialTokens)
			}
			for content, id := range tc.wantSpecial {
				if got, ok := spec.special[content]; !ok || got != id {
					t.Errorf("special %q = %d, %v; want %d", content, got, ok, id)
				}
			}
		})
	}
}

// TestLoadTiktokenLayouts: Load accepts a rank file and the directory layouts, and
// FindTiktoken leaves tokenizer.json directories alone.
func TestLoadTiktokenLayouts(t *testing.T) {
	ranks := rankFile("hi")
	write := func(t *testing.T, dir string, files map[string][]byte) string {
		t.Helper()
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	config := []byte(`{"added_tokens_decoder": {"257": {"content": "<|begin|>"}}, "bos_token": "<|begin|>"}`)
	tests := []struct {
		name    string
		files   map[string][]byte
		path    string // relative to the directory; "" is the directory
		wantErr string
		check   func(t *testing.T, tok *Tokenizer)
	}{
		{name: "tiktoken.model directory", files: map[string][]byte{"tiktoken.model": ranks, "tokenizer_config.json": config},
			check: func(t *testing.T, tok *Tokenizer) {
				ids, err := tok.Encode("<|begin|>hi", true)
				if err != nil || !slices.Equal(ids, []uint32{257, 256}) {
					t.Errorf("Encode = %v, %v; want [257 256]", ids, err)
				}
				if tok.Config().BOSToken != "<|begin|>" || tok.VocabSize() != 257+reservedSpecialTokens {
					t.Errorf("BOS %q, VocabSize %d", tok.Config().BOSToken, tok.VocabSize())
				}
			}},
		{name: "tiktoken.model file", files: map[string][]byte{"tiktoken.model": ranks}, path: "tiktoken.model"},
		{name: "one encoding file", files: map[string][]byte{"cl100k_base.tiktoken": ranks},
			check: func(t *testing.T, tok *Tokenizer) {
				if _, ok := tok.TokenToID("<|endofprompt|>"); !ok {
					t.Error("cl100k_base's special tokens are missing")
				}
			}},
		{name: "two encoding files", files: map[string][]byte{"cl100k_base.tiktoken": ranks, "o200k_base.tiktoken": ranks}, wantErr: "several tiktoken files"},
		{name: "unknown encoding", files: map[string][]byte{"p99k.tiktoken": ranks}, wantErr: "unknown tiktoken encoding \"p99k\""},
		{name: "tokenizer.json wins", files: map[string][]byte{"tokenizer.json": []byte(`{}`), "tiktoken.model": ranks}, wantErr: "no model"},
		{name: "bad ranks", files: map[string][]byte{"tiktoken.model": []byte("x")}, wantErr: "tiktoken.model: line 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := write(t, t.TempDir(), tc.files)
			tok, err := Load(filepath.Join(dir, tc.path))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, tok)
			}
		})
	}
}

// FuzzTiktokenEncodeDecode: on any string, cl100k_base and o200k_base either reject
// invalid UTF-8 with ErrInvalidUTF8 or return ids that decode back to the exact text
// (byte-level, no normalizer), with special tokens recognized or, split, kept as text
// (then no special id appears).
func FuzzTiktokenEncodeDecode(f *testing.F) {
	var toks []*Tokenizer
	for _, name := range []string{"cl100k_base", "o200k_base"} {
		file := filepath.Join(testdataDir(), "tokenizers", name, name+".tiktoken")
		if _, err := os.Stat(file); err != nil {
			f.Skipf("%s is missing (run make testdata): %v", file, err)
		}
		toks = append(toks, loadTiktokenTest(f, name))
	}
	for _, s := range []string{
		"", " ", "hello world", "  trailing  \n\n", "don't I'LL 1234567", "日本語 한국어 🙂 e\u0301",
		"<|endoftext|>x<|endofprompt|>", "<|endof", "\xff\xfe", "a\x00b", "HTTPRequest/path\r\n",
		"ſ's ǅungla", "\u00a0\u3000\u2028",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range toks {
			for _, split := range []bool{false, true} {
				enc := tok.Encode
				if split {
					enc = tok.EncodeSplitSpecialTokens
				}
				ids, err := enc(s, false)
				if !utf8.ValidString(s) {
					if !errors.Is(err, ErrInvalidUTF8) {
						t.Fatalf("Encode(%q): err = %v, want ErrInvalidUTF8", s, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("Encode(%q): %v", s, err)
				}
				if split && slices.ContainsFunc(ids, tok.IsSpecial) {
					t.Fatalf("EncodeSplitSpecialTokens(%q) = %v holds a special id", s, ids)
				}
				back, err := tok.Decode(ids, false)
				if err != nil || back != s {
					t.Fatalf("split=%v: Decode(Encode(%q)) = %q, %v", split, s, back, err)
				}
			}
		}
	})
}

package tokenize

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// tinyBPE is a small SentencePiece-style tokenizer: ▁ metaspace, byte fallback, unk.
const tinyBPE = `{
  "added_tokens": [
    {"id": 0, "content": "<unk>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
    {"id": 1, "content": "<s>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
    {"id": 12, "content": "[X]", "special": false, "normalized": false, "lstrip": true, "rstrip": true, "single_word": false}
  ],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "pre_tokenizer": null,
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
  "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
    "vocab": {"<unk>": 0, "<s>": 1, "▁": 2, "a": 3, "b": 4, "aa": 5, "ab": 6, "▁a": 7, "<0xC3>": 8, "<0xA9>": 9, "▁aa": 10, "ba": 11},
    "merges": ["a a", "a b", "▁ a", "▁a a", "b a"]}
}`

func tinyTokenizer(t *testing.T) *Tokenizer {
	t.Helper()
	tok, err := FromJSON([]byte(tinyBPE), []byte(`{"bos_token": {"content": "<s>"}, "chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}], "model_max_length": 1e30, "add_bos_token": true}`))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestTinyBPE(t *testing.T) {
	tok := tinyTokenizer(t)
	cases := []struct {
		text string
		want []uint32
	}{
		// "▁aaa": (a,a) has the lowest rank at two positions; the leftmost wins → ▁ aa a.
		{"aaa", []uint32{1, 2, 5, 3}},
		// "▁ab": (a,b) ranks before (▁,a).
		{"ab", []uint32{1, 2, 6}},
		{"a", []uint32{1, 7}},
		{"é", []uint32{1, 2, 8, 9}},           // byte fallback
		{"xyz", []uint32{1, 2, 0}},            // fused unk
		{"a [X] b", []uint32{1, 7, 12, 2, 4}}, // lstrip/rstrip eat the spaces
		{"<s>a", []uint32{1, 1, 7}},           // special token in text; the rest gets its own ▁
		{"", []uint32{1}},
	}
	for _, tc := range cases {
		got, err := tok.Encode(tc.text, true)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
	s, err := tok.Decode([]uint32{1, 7, 2, 8, 9, 4}, true)
	if err != nil || s != "a éb" {
		t.Errorf("Decode = %q, %v; want %q", s, err, "a éb")
	}
	s, _ = tok.Decode([]uint32{8, 3}, false)
	if s != "\uFFFDa" {
		t.Errorf("Decode of a lone byte = %q", s)
	}
	if _, err := tok.Decode([]uint32{99}, false); err == nil {
		t.Error("Decode of an unknown id: no error")
	}
	if _, err := tok.Encode("\xff", false); !errors.Is(err, ErrInvalidUTF8) {
		t.Errorf("Encode(invalid UTF-8) error = %v, want ErrInvalidUTF8", err)
	}
	if tok.VocabSize() != 13 || !tok.IsSpecial(1) || tok.IsSpecial(12) || tok.IsSpecial(3) {
		t.Errorf("VocabSize %d, IsSpecial wrong", tok.VocabSize())
	}
	if id, ok := tok.TokenToID("[X]"); !ok || id != 12 {
		t.Errorf("TokenToID([X]) = %d, %v", id, ok)
	}
	if s, ok := tok.IDToToken(7); !ok || s != "▁a" {
		t.Errorf("IDToToken(7) = %q, %v", s, ok)
	}
	cfg := tok.Config()
	if cfg.BOSToken != "<s>" || cfg.ChatTemplate != "D" || cfg.ChatTemplates["tool_use"] != "T" ||
		cfg.ModelMaxLength != math.MaxInt || cfg.AddBOSToken == nil || !*cfg.AddBOSToken || cfg.AddEOSToken != nil {
		t.Errorf("Config = %+v", cfg)
	}
}

func TestLossyUTF8(t *testing.T) {
	cases := []struct {
		in   []byte
		want string
	}{
		{[]byte("ok"), "ok"},
		{[]byte{0xE2, 0x82, 'A'}, "\uFFFDA"},             // truncated sequence: one U+FFFD
		{[]byte{0xF0, 0x9F, 0x98}, "\uFFFD"},             // truncated 4-byte sequence
		{[]byte{0xC0, 0x80}, "\uFFFD\uFFFD"},             // overlong lead: each byte
		{[]byte{0xED, 0xA0, 0x80}, "\uFFFD\uFFFD\uFFFD"}, // surrogate
		{[]byte{0x80, 'x', 0xFF}, "\uFFFDx\uFFFD"},
	}
	for _, tc := range cases {
		if got := lossyUTF8(tc.in); got != tc.want {
			t.Errorf("lossyUTF8(% x) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// The direct scan and the heap must merge identically (the heap serves long words).
func TestMergeScanEqualsHeap(t *testing.T) {
	for _, name := range []string{"llama2", "gemma3"} {
		m := loadTestTokenizer(t, name).bpe
		r := rand.New(rand.NewPCG(3, 4))
		alphabet := []rune("▁▁▁aaabbeeinorst.,\n中文")
		for i := 0; i < 3000; i++ {
			n := 2 + r.IntN(smallWord-2)
			word := make([]rune, n)
			for j := range word {
				word[j] = alphabet[r.IntN(len(alphabet))]
			}
			syms := m.initialSymbols(nil, string(word))
			a := m.mergeScan(new(mergeScratch), append([]uint32(nil), syms...))
			b := m.mergeHeap(new(mergeScratch), append([]uint32(nil), syms...))
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("%s %q: scan %v, heap %v", name, string(word), a, b)
			}
		}
	}
}

// Encode must be safe and deterministic under concurrent use (run with -race).
func TestConcurrentEncode(t *testing.T) {
	tok := loadTestTokenizer(t, "llama3")
	g := loadGolden(t, "llama3")
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < len(g.Cases); i += 2 {
				c := g.Cases[i]
				got, err := tok.Encode(c.Text, true)
				if err != nil || !slices.Equal(got, c.WithSpecial) {
					errs <- fmt.Errorf("case %s: %v", c.Name, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestLoadFileOrDir(t *testing.T) {
	dir := filepath.Join(testdataDir(), "tokenizers", "gemma3")
	loadTestTokenizer(t, "gemma3") // fails with "run make testdata" if absent
	a, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if a.VocabSize() != 262145 || b.VocabSize() != a.VocabSize() {
		t.Errorf("VocabSize %d / %d, want 262145", a.VocabSize(), b.VocabSize())
	}
	if a.Config().EOSToken != "<end_of_turn>" || b.Config().EOSToken != "<end_of_turn>" {
		t.Errorf("config not read beside the file")
	}
}

package tokenize

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// loadOrSkip loads a testdata tokenizer, skipping when make testdata has
// not fetched it.
func loadOrSkip(f *testing.F, name string) *Tokenizer {
	f.Helper()
	dir := filepath.Join(testdataDir(), "tokenizers", name)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		f.Skipf("tokenizer %s is missing (run make testdata): %v", name, err)
	}
	return loadTestTokenizer(f, name)
}

// FuzzEncodeDecode: on any string, Encode either rejects invalid UTF-8 with
// ErrInvalidUTF8 or returns ids that decode back to the text. Llama 3 is
// byte-level BPE without a normalizer, so the round trip is exact; Qwen3
// applies NFC first, so its round trip is exact on the normalized text
// (decode(encode(x)) == x for x = decode(encode(s))). With special tokens
// split (kept as text) the round trip is the same and no special id appears.
//
// bert_uncased (WordPiece) loses case, accents, control runes and spacing, so its
// decode is not the text; what holds instead is that the decoded text is a fixed point:
// encoding it gives the same ids again (decode respells each word as the normalized
// word its pieces came from, and "[UNK]" as the unk token itself).
//
// The Unigram tokenizers (albert, albert_cased) lose as much, and their normalizers are
// not idempotent on decoded text (ALBERT's turns two apostrophes into a double quote, so
// the input 'A' decodes to two apostrophes, which encode as a double quote). What must
// hold is that decode∘encode (special tokens skipped) settles: after two rounds a third
// changes nothing but runs of whitespace (an unknown word leaves the ▁ piece before it
// behind as a space).
func FuzzEncodeDecode(f *testing.F) {
	llama3, qwen3 := loadOrSkip(f, "llama3"), loadOrSkip(f, "qwen3")
	bert := loadOrSkip(f, "bert_uncased")
	unigrams := map[string]*Tokenizer{"albert": loadOrSkip(f, "albert"), "albert_cased": loadOrSkip(f, "albert_cased")}
	for _, s := range []string{
		"", " ", "hello world", "  leading and trailing  ", "\n\n\t\r\n", "don't I'll 123456789",
		"日本語 한국어 🙂 👨‍👩‍👧‍👦 e\u0301", "<|im_start|>user\nhi<|im_end|>", "<|begin_of_text|><|eot_id|>",
		"<|im_", "\xff\xfe", "a\x00b", "\u00a0\u3000", "<think>x</think>",
		"[CLS] Crème Brûlée [SEP] 中文 İstanbul", "straw-berries!! don't", "\u200b\ufeffx\ue000y",
		"ｶﾞｷﾞ ﬁ\u0301 x\u20e3y ``q'' [MASK]  <unk>", "▁▁ a ▁b", "\u1100\u1161\u11a8 𝐁𝐨𝐥𝐝",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		roundTrip := func(tk *Tokenizer, s string, split bool) string {
			enc := tk.Encode
			if split {
				enc = tk.EncodeSplitSpecialTokens
			}
			ids, err := enc(s, false)
			if !utf8.ValidString(s) {
				if !errors.Is(err, ErrInvalidUTF8) {
					t.Fatalf("Encode(%q): err = %v, want ErrInvalidUTF8", s, err)
				}
				return ""
			}
			if err != nil {
				t.Fatalf("Encode(%q): %v", s, err)
			}
			if split && slices.ContainsFunc(ids, tk.IsSpecial) {
				t.Fatalf("EncodeSplitSpecialTokens(%q) = %v holds a special id", s, ids)
			}
			back, err := tk.Decode(ids, false)
			if err != nil {
				t.Fatalf("Decode(Encode(%q)): %v", s, err)
			}
			return back
		}
		for _, split := range []bool{false, true} {
			if back := roundTrip(llama3, s, split); utf8.ValidString(s) && back != s {
				t.Errorf("llama3 split=%v: Decode(Encode(%q)) = %q", split, s, back)
			}
			if norm := roundTrip(qwen3, s, split); utf8.ValidString(s) {
				if back := roundTrip(qwen3, norm, split); back != norm {
					t.Errorf("qwen3 split=%v: Decode(Encode(%q)) = %q", split, norm, back)
				}
			}
		}
		if !utf8.ValidString(s) {
			return
		}
		ids, err := bert.Encode(s, false)
		if err != nil {
			t.Fatalf("bert_uncased: Encode(%q): %v", s, err)
		}
		text, err := bert.Decode(ids, false)
		if err != nil {
			t.Fatalf("bert_uncased: Decode(Encode(%q)): %v", s, err)
		}
		again, err := bert.Encode(text, false)
		if err != nil {
			t.Fatalf("bert_uncased: Encode(%q): %v", text, err)
		}
		if !slices.Equal(again, ids) {
			t.Errorf("bert_uncased: Encode(%q) = %v, but Encode of its decoding %q = %v", s, ids, text, again)
		}
		for name, tk := range unigrams {
			decodeEncode := func(s string) string {
				ids, err := tk.Encode(s, false)
				if err != nil {
					t.Fatalf("%s: Encode(%q): %v", name, s, err)
				}
				for _, id := range ids {
					if int(id) >= tk.VocabSize() {
						t.Fatalf("%s: Encode(%q) = %v holds id %d, outside the vocabulary", name, s, ids, id)
					}
				}
				back, err := tk.Decode(ids, true)
				if err != nil {
					t.Fatalf("%s: Decode(Encode(%q)): %v", name, s, err)
				}
				return back
			}
			words := func(s string) string { return strings.Join(strings.Fields(s), " ") }
			twice := decodeEncode(decodeEncode(s))
			if thrice := decodeEncode(twice); words(thrice) != words(twice) {
				t.Errorf("%s: decode∘encode of %q does not settle: %q, then %q", name, s, twice, thrice)
			}
		}
	})
}

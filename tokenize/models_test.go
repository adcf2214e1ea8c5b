package tokenize

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
)

// The goldens pin WordPiece and Unigram on real vocabularies; these small vocabularies
// pin the rules the real ones rarely reach: ties, byte fallback (ALBERT has no byte
// pieces), fused unknown runs, the rune limit, and corrupt charsmaps.

func modelOnly(t *testing.T, model string) *Tokenizer {
	t.Helper()
	tk, err := FromJSON([]byte(`{"model":`+model+`}`), nil)
	if err != nil {
		t.Fatalf("FromJSON: %v", err)
	}
	return tk
}

func TestWordPieceRules(t *testing.T) {
	tk := modelOnly(t, `{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##",
		"max_input_chars_per_word":6,
		"vocab":{"[UNK]":0,"un":1,"##aff":2,"##able":3,"é":4,"##é":5,"##a":6,"a":7}}`)
	for _, tc := range []struct {
		word string
		want []uint32
	}{
		{"un", []uint32{1}},
		{"unaff", []uint32{1, 2}},     // longest match first: "un", then "##aff"
		{"unaffa", []uint32{1, 2, 6}}, // 6 runes: at the limit
		{"unaffable", []uint32{0}},    // 9 runes: over max_input_chars_per_word
		{"unx", []uint32{0}},          // one unmatched position: the whole word is [UNK]
		{"ééé", []uint32{4, 5, 5}},    // matches end on rune boundaries
		{"aa", []uint32{7, 6}},
		{"xa", []uint32{0}},
	} {
		got, err := tk.Encode(tc.word, false)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, %v; want %v", tc.word, got, err, tc.want)
		}
	}
	if _, err := FromJSON([]byte(`{"model":{"type":"WordPiece","unk_token":"[UNK]","vocab":{"a":0}}}`), nil); err == nil {
		t.Error("FromJSON accepted a WordPiece model whose unk_token is not in the vocabulary")
	}
}

func TestWordPieceDecoderCleanup(t *testing.T) {
	d := wordPieceDecoder{prefix: "##", cleanup: true}
	got := d.DecodeChain([]string{"hello", "##s", ",", "world", "!", "do", "n", "'", "t"})
	want := []string{"hello", "s", ",", " world", "!", " do", " n", " '", " t"}
	if !slices.Equal(got, want) {
		t.Errorf("DecodeChain = %q, want %q", got, want)
	}
}

func TestUnigramRules(t *testing.T) {
	const vocab = `[["<unk>",0],["a",-1],["b",-1],["ab",-2],["abc",-9],["c",-3],["<0x64>",-4],["<0xC3>",-4],["<0xA9>",-4]]`
	plain := modelOnly(t, `{"type":"Unigram","unk_id":0,"vocab":`+vocab+`}`)
	bytes := modelOnly(t, `{"type":"Unigram","unk_id":0,"byte_fallback":true,"vocab":`+vocab+`}`)
	for _, tc := range []struct {
		text        string
		plain, byte []uint32
	}{
		// a+b and ab both score -2: the first path found (ab, from the earlier start) wins.
		{"ab", []uint32{3}, []uint32{3}},
		// abc (-9) loses to ab+c (-5).
		{"abc", []uint32{3, 5}, []uint32{3, 5}},
		// d has no piece: an unk edge, and with byte fallback its <0x64> token.
		{"dab", []uint32{0, 3}, []uint32{6, 3}},
		// consecutive unknown runes fuse into one unk, or one byte token each.
		{"dd", []uint32{0}, []uint32{6, 6}},
		{"é", []uint32{0}, []uint32{7, 8}},
		// a fused run with a byte that has no token falls back to unk as a whole.
		{"de", []uint32{0}, []uint32{0}},
	} {
		for _, m := range []struct {
			name string
			tk   *Tokenizer
			want []uint32
		}{{"plain", plain, tc.plain}, {"byte_fallback", bytes, tc.byte}} {
			got, err := m.tk.Encode(tc.text, false)
			if err != nil || !slices.Equal(got, m.want) {
				t.Errorf("%s: Encode(%q) = %v, %v; want %v", m.name, tc.text, got, err, m.want)
			}
		}
	}
	if _, err := FromJSON([]byte(`{"model":{"type":"Unigram","unk_id":5,"vocab":[["a",0]]}}`), nil); err == nil {
		t.Error("FromJSON accepted a Unigram unk_id outside the vocabulary")
	}
}

// charsmap builds a Precompiled blob from trie units and a replacement pool.
func charsmap(units []uint32, pool string) string {
	b := binary.LittleEndian.AppendUint32(nil, uint32(4*len(units)))
	for _, u := range units {
		b = binary.LittleEndian.AppendUint32(b, u)
	}
	return base64.StdEncoding.EncodeToString(append(b, pool...))
}

func TestPrecompiledRejectsOrSurvivesCorruptCharsmaps(t *testing.T) {
	for _, tc := range []struct {
		name, blob string
		ok         bool
	}{
		{"short header", base64.StdEncoding.EncodeToString([]byte{1, 0}), false},
		{"trie larger than the blob", base64.StdEncoding.EncodeToString([]byte{8, 0, 0, 0, 0, 0, 0, 0}), false},
		{"empty trie", charsmap(nil, ""), false},
		{"trie size not a multiple of 4", base64.StdEncoding.EncodeToString([]byte{3, 0, 0, 0, 0, 0, 0}), false},
		{"not base64", "!!", false},
		{"pool not UTF-8", charsmap([]uint32{0}, "\xff"), false},
		// A root whose children all point outside the trie: every lookup misses.
		{"dangling root", charsmap([]uint32{0xFFFFFC00}, "x\x00"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := newPrecompiled([]byte(fmt.Sprintf(`{"type":"Precompiled","precompiled_charsmap":%q}`, tc.blob)))
			if !tc.ok {
				if err == nil {
					t.Fatal("accepted")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{"", "abc", "e\u0301", "ｶﾞ 👨‍👩‍👧", "\x00"} {
				if got := n.Normalize(s); got != s {
					t.Errorf("Normalize(%q) = %q, want it unchanged", s, got)
				}
			}
		})
	}
}

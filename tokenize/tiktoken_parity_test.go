package tokenize

import (
	"github.com/kvgate/kvgate/internal/testutil"
	"path/filepath"
	"slices"
	"testing"
)

// The tiktoken goldens come from npm tiktoken (scripts/tokenizers/tiktoken-golden.mjs):
// with_special is encode(text, allowed_special="all"), without_special is
// encode_ordinary(text). tiktoken adds no BOS, so Encode gives with_special whatever
// addSpecialTokens says, and EncodeSplitSpecialTokens gives without_special.
var tiktokenGoldens = []string{"cl100k_base", "o200k_base", "llama3_tiktoken", "kimi_layout"}

// loadTiktokenTest loads a fetched tiktoken tokenizer directory through Load (once per
// test binary); a missing directory fails the test.
func loadTiktokenTest(tb testing.TB, name string) *Tokenizer {
	tb.Helper()
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if t, ok := loaded[name]; ok {
		return t
	}
	dir := filepath.Join(testdataDir(), "tokenizers", name)
	if _, ok, err := FindTiktoken(dir); err != nil || !ok {
		tb.Fatalf("tiktoken tokenizer %s is missing (ok=%v, %v): run make testdata", name, ok, err)
	}
	t, err := Load(dir)
	if err != nil {
		tb.Fatalf("load %s: %v", name, err)
	}
	loaded[name] = t
	return t
}

func TestTiktokenParity(t *testing.T) {
	for _, name := range tiktokenGoldens {
		t.Run(name, func(t *testing.T) {
			tok := loadTiktokenTest(t, name)
			g := loadGolden(t, name)
			pass := 0
			for _, tc := range g.Cases {
				ok := true
				check := func(what string, got []uint32, err error, want []uint32) {
					switch {
					case err != nil:
						t.Errorf("%s/%s: %s: %v", name, tc.Name, what, err)
						ok = false
					case !slices.Equal(got, want):
						t.Errorf("%s/%s: %s: %s", name, tc.Name, what, testutil.FirstDiff(got, want))
						ok = false
					}
				}
				got, err := tok.Encode(tc.Text, true)
				check("Encode(add special)", got, err, tc.WithSpecial)
				got, err = tok.Encode(tc.Text, false)
				check("Encode", got, err, tc.WithSpecial)
				got, err = tok.EncodeSplitSpecialTokens(tc.Text, false)
				check("EncodeSplitSpecialTokens", got, err, tc.WithoutSpecial)
				for _, skip := range []bool{false, true} {
					want := tc.Decode
					if skip {
						want = tc.DecodeSkipSpecial
					}
					s, err := tok.Decode(tc.WithSpecial, skip)
					switch {
					case err != nil:
						t.Errorf("%s/%s: Decode(skip=%v): %v", name, tc.Name, skip, err)
						ok = false
					case s != want:
						t.Errorf("%s/%s: Decode(skip=%v): %s", name, tc.Name, skip, firstStringDiff(s, want))
						ok = false
					}
				}
				if ok {
					pass++
				}
			}
			t.Logf("%s: %d/%d cases match the reference", name, pass, len(g.Cases))
		})
	}
}

// The tiktoken goldens must split with the hand-written scanners, never regexp2.
func TestTiktokenGoldensUseScanners(t *testing.T) {
	for _, name := range tiktokenGoldens {
		tok := loadTiktokenTest(t, name)
		seq, ok := tok.pre.(sequencePreTokenizer)
		if !ok || len(seq) == 0 {
			t.Fatalf("%s: pre-tokenizer %T, want a sequence", name, tok.pre)
		}
		split, ok := seq[0].(splitPreTokenizer)
		if !ok {
			t.Fatalf("%s: first step %T, want a split", name, seq[0])
		}
		if _, ok := split.m.(scanMatcher); !ok {
			t.Errorf("%s: the pattern runs on %T, not a scanner", name, split.m)
		}
	}
}

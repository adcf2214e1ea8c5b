package tokenize

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// The hand-written scanners must find exactly the matches the general regex engine finds
// for the same pattern.

var scannerPatterns = []struct {
	name    string
	pattern string
}{
	{"llama3", patLlama3},
	{"qwen", patQwen},
	{"gpt2", patGPT2},
	{"digits3", patDigits},
	{"cjk", patCJK},
	{"deepseek", patDSWord},
	{"o200k", patO200k},
	{"kimi", patKimi},
}

// regexp2Pattern is pattern in regexp2's syntax: Kimi K2's class intersections
// [X&&[^\p{Han}]] are written as .NET's class subtraction [X-[\p{Han}]] (regexp2 would
// read "&&[" as literal characters).
func regexp2Pattern(pattern string) string {
	return strings.ReplaceAll(pattern, `&&[^\p{Han}]]`, `-[\p{Han}]]`)
}

// randomText mixes the character kinds the patterns distinguish. It leaves out ſ
// (U+017F): Oniguruma's (?i) folds it to s, so the reference splits "'ſa" as "'ſ" + "a",
// while regexp2 does not fold it; TestContractionLongS pins the reference behaviour.
func randomText(r *rand.Rand) string {
	pieces := []string{
		"a", "Z", "é", "ß", "ñ", "Ω", "й", "ا", "中", "文", "の", "カ", "한", "ǅ",
		"0", "7", "٣", "½", "²", "Ⅻ",
		" ", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\u0085", "\v", "\f",
		".", ",", "!", "?", "-", "_", "(", ")", "[", "\\", "\"", "`", "$", "+", "|", "~", "<", ">", "/", "@", "#",
		"'", "'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'Ll", "'d", "'D", "'x",
		"\u0301", "\u0308", "\u200d", "\u200b", "😀", "👍🏽", "€", "©", "§", "\x00", "\x7f",
		"hello", "World", "I", "x'", "HTTP", "Ǆ", "ǅ", "ʰ", "ª", "ᾼ", "々", "〆", "汉字", "\u0345",
	}
	n := r.IntN(24)
	var sb strings.Builder
	for range n {
		sb.WriteString(pieces[r.IntN(len(pieces))])
	}
	return sb.String()
}

func TestScannersMatchRegexFallback(t *testing.T) {
	for _, tc := range scannerPatterns {
		t.Run(tc.name, func(t *testing.T) {
			fast, err := newRegexMatcher(tc.pattern)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := fast.(scanMatcher); !ok {
				t.Fatalf("pattern %q has no scanner (got %T)", tc.pattern, fast)
			}
			slow, err := newFallbackMatcher(regexp2Pattern(tc.pattern))
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
			fixed := []string{"", " ", "  a", "a  ", " \n ", "\n\n  x", "x  \r\n\t y", "'s'S'll", "12345", "中文カナ한국"}
			for i := 0; i < 5000+len(fixed); i++ {
				s := ""
				if i < len(fixed) {
					s = fixed[i]
				} else {
					s = randomText(r)
				}
				got := fmt.Sprint(fast.FindAll(s, nil))
				want := fmt.Sprint(slow.FindAll(s, nil))
				if got != want {
					t.Fatalf("text %q:\n scanner %s\n regexp2 %s", s, got, want)
				}
			}
		})
	}
}

// The golden tokenizers must use the scanners, never the slow fallback.
func TestGoldenTokenizersUseScanners(t *testing.T) {
	for _, name := range goldenTokenizers {
		tok := loadTestTokenizer(t, name)
		var walk func(pt PreTokenizer)
		walk = func(pt PreTokenizer) {
			switch v := pt.(type) {
			case sequencePreTokenizer:
				for _, p := range v {
					walk(p)
				}
			case splitPreTokenizer:
				if _, ok := v.m.(regexp2Matcher); ok {
					t.Errorf("%s: a Split pattern fell back to regexp2", name)
				}
			}
		}
		walk(tok.pre)
	}
}

func TestSplitBehaviors(t *testing.T) {
	m := literalMatcher{"-"}
	cases := []struct {
		behavior splitBehavior
		invert   bool
		want     string
	}{
		{behaviorRemoved, false, "[a b c]"},
		{behaviorIsolated, false, "[a - - b - c -]"},
		{behaviorMergedWithPrevious, false, "[a- - b- c-]"},
		{behaviorMergedWithNext, false, "[a - -b -c -]"},
		{behaviorContiguous, false, "[a -- b - c -]"},
		{behaviorRemoved, true, "[- - - -]"},
	}
	for _, tc := range cases {
		got := splitBy(nil, preToken{s: "a--b-c-"}, m, tc.behavior, tc.invert, new(scratch))
		var parts []string
		for _, p := range got {
			parts = append(parts, p.s)
		}
		if s := fmt.Sprint(parts); s != tc.want {
			t.Errorf("behavior %d invert %v: got %s, want %s", tc.behavior, tc.invert, s, tc.want)
		}
	}
}

// Checked against the reference pre-tokenizer (tokenizers 0.23.2): "'ſa" → "'ſ", "a".
func TestContractionLongS(t *testing.T) {
	got := fmt.Sprint(scanLlama("'ſa", 3, nil))
	if want := "[[0 3] [3 4]]"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	got = fmt.Sprint(scanGPT2("'ſa", nil))
	if want := "[[0 1] [1 4]]"; got != want {
		t.Errorf("GPT-2 (case-sensitive): got %s, want %s", got, want)
	}
}

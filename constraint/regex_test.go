package constraint

import (
	"strings"
	"testing"
)

func TestCheckRegexAccepts(t *testing.T) {
	for _, tc := range []struct{ name, re string }{
		{"ISO date", `^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$`},
		{"email", `[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}`},
		{"US phone", `\(?\d{3}\)?[-. ]?\d{3}[-. ]?\d{4}`},
		{"E.164 phone", `\+[1-9]\d{1,14}`},
		{"UUID", `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`},
		{"IPv4", `((25[0-5]|2[0-4]\d|[01]?\d\d?)\.){3}(25[0-5]|2[0-4]\d|[01]?\d\d?)`},
		{"lazy quantifier", `<b>.*?</b>`},
		{"non-capturing and named groups", `(?:ab)+(?P<year>\d{4})(?<month>\d{2})`},
		{"choice of words", `(yes|no|maybe)`},
		{"unicode", `[\p{L}\s]+|[À-ÿ]+`},
		{"empty", ``},
		{"repeat above Go's 1000", `[a-z]{1,5000}`},
		{"hostname: nested repeats past Go's product cap", `(\w{1,63}\.){1,127}\w{2,63}`},
		{"nested fixed repeats", `((a{100}){100}){100}`},
		{"ECMA-262 unicode escapes (JSON Schema)", `^[^\u0000-\u001f"\\]*\u00e9\u{1F600}$`},
		{"control escape", `a\cJb`},
		{"open repeat above 1000", `x{2000,}`},
		{"brace that is no repeat", `a{b}`},
		{"repeat-like text in a class", `[{5000}]`},
		{"escaped brace", `\{5000\}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckRegex(tc.re, Limits{}); err != nil {
				t.Fatalf("CheckRegex(%q) = %v", tc.re, err)
			}
		})
	}
}

func TestCheckRegexRejects(t *testing.T) {
	for _, tc := range []struct{ name, re, want string }{
		{"unclosed class", `[a-z`, "missing closing ]"},
		{"unclosed group", `(ab`, "missing closing )"},
		{"unopened group", `ab)`, "unexpected )"},
		{"nothing to repeat", `*a`, "missing argument to repetition operator"},
		{"lookahead", `^(?=.*\d).{8,}$`, `lookahead "(?=" is not supported by the engines`},
		{"negative lookahead", `a(?!b)`, "lookahead"},
		{"lookbehind", `(?<=\$)\d+`, "lookbehind"},
		{"negative lookbehind", `(?<!x)y`, "lookbehind"},
		{"backreference", `(a)\1`, `backreference "\\1" is not supported by the engines`},
		{"atomic group", `(?>a+)b`, "atomic group"},
		{"possessive quantifier", `a*+b`, "possessive quantifier"},
		{"bad escape", `\q`, "invalid escape sequence"},
		{"reversed range", `[z-a]`, "invalid character class range"},
		{"reversed repeat", `a{5,2}`, `invalid repeat count: "{5,2}" has its minimum above its maximum`},
		{"repeat of nothing", `{2}x`, "missing argument to repetition operator"},
		{"two counted repeats, quoted as written", `a{2}{3}`, "invalid nested repetition operator: \"{2}{3}\""},
		{"Python end anchor", `abc\Z`, "invalid escape sequence"},
		{"short unicode escape", `\u12`, "invalid escape sequence"},
		{"size bound", strings.Repeat("a", DefaultMaxBytes+1), "over the limit"},
		{"nesting bound", strings.Repeat("(", 65) + strings.Repeat(")", 65), "groups nested deeper than 64, the limit, at byte 64"},
		{"possessive deep inside", strings.Repeat("(?:a", 50) + "*+" + strings.Repeat(")", 50), `possessive quantifier "*+"`},
		{"long unclosed text is cut", "(" + strings.Repeat("a", 1000), `missing closing ): "(aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"...`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckRegex(tc.re, Limits{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckRegex(%.40q) = %v, want an error containing %q", tc.re, err, tc.want)
			}
		})
	}
}

func TestToGoSyntax(t *testing.T) {
	for in, want := range map[string]string{
		`a{5000}`:          `a{1}`,
		`a{0,5000}`:        `a{0,1}`,
		`a{1001,}`:         `a{1,}`,
		`a{0}`:             `a{0}`,
		`a{00,01000}`:      `a{0,1}`,
		`(b{2}){3,4}`:      `(b{1}){1,1}`,
		`[{5000}]`:         `[{5000}]`,
		`[]{5000}]`:        `[]{5000}]`,
		`[^]{5}]x{5}`:      `[^]{5}]x{1}`,
		`\{5000}`:          `\{5000}`,
		`a{x}`:             `a{x}`,
		`a{,5}`:            `a{,5}`,
		`a{2,`:             `a{2,`,
		`a{99999999999}`:   `a{1}`,
		`[^\u0000-\u001F]`: `[^\x{0000}-\x{001F}]`,
		`\u{1F600}`:        `\x{1F600}`,
		`\cJ\cj`:           `\x{0a}\x{0a}`,
		`\\u0041`:          `\\u0041`,
		`\u12`:             `\u12`,
	} {
		got, err := toGoSyntax(in, DefaultMaxDepth)
		if err != nil || got != want {
			t.Errorf("toGoSyntax(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{`a{5,2}`, `a{100000000000000000000,99}`, `[a]{3,02}`} {
		if _, err := toGoSyntax(in, DefaultMaxDepth); err == nil || !strings.Contains(err.Error(), "minimum above its maximum") {
			t.Errorf("toGoSyntax(%q) = %v, want a minimum-above-maximum error", in, err)
		}
	}
}

func BenchmarkCheckRegex(b *testing.B) {
	for name, re := range map[string]string{
		"email":        `[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}`,
		"256 KiB alts": strings.TrimSuffix(strings.Repeat("abc|", DefaultMaxBytes/4), "|"),
		"deep groups":  strings.Repeat("(", 1000) + strings.Repeat(")", 1000),
		"256 KiB of (": strings.Repeat("(", DefaultMaxBytes),
		"many repeats": strings.Repeat("a{2000}", 1000),
	} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(re)))
			b.ReportAllocs()
			for b.Loop() {
				_ = CheckRegex(re, Limits{})
			}
		})
	}
}

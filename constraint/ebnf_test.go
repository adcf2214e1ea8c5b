package constraint

import (
	"strings"
	"testing"
)

// jsonGrammar is a JSON grammar in the style of llama.cpp's json.gbnf,
// written for these tests.
const jsonGrammar = `# any JSON value, with bounded white space
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# at most 20 characters of white space
ws ::= | " " | "\n" [ \t]{0,20}
`

const arithmeticGrammar = `root ::= expr ("=" expr)*
expr ::= term ([-+*/] term)*
term ::= num | "(" expr ")"
num  ::= [0-9]+
`

func TestCheckEBNFAccepts(t *testing.T) {
	for _, tc := range []struct{ name, g string }{
		{"JSON in json.gbnf style", jsonGrammar},
		{"arithmetic", arithmeticGrammar},
		{"one rule", `root ::= "yes" | "no"`},
		{"forward and left recursion", `root ::= root "a" | "a"`},
		{"rule body over lines after |", "root ::= \"a\" |\n         \"b\" |\n         \"c\""},
		{"comment at end without newline", `root ::= "a" # done`},
		{"empty literal and empty group", `root ::= "" | ( ) "x"`},
		{"any character class", `root ::= [^]*`},
		{"escapes in literals", `root ::= "\"\\\/\'\?\n\r\t\b\f\a\v\0\e\x41\x1F600\u00e9\U0001F600"`},
		{"escapes in classes", `root ::= [\^\$\.\*\+\(\)\[\]\{\}\|\-\/\\a-z\u4e00-\u9fff]`},
		{"literal dash at class ends", `root ::= [-a] [a-] [^-]`},
		{"non-ASCII text", `root ::= "中文" [À-ÿ] "😀"`},
		{"repetition ranges", `root ::= "a"{3} "b"{2,4} "c"{2,} "d"{0}`},
		{"quantifier after a space (GBNF)", `root ::= "a" * "b" {2}`},
		{"names with - _ .", "root ::= my-rule\nmy-rule ::= my_rule.x\nmy_rule.x ::= \"z\""},
		{"CRLF line ends", "root ::= a\r\na ::= \"x\"\r\n"},
		{"rule options", "root ::= \"answer:\" value\nvalue[temperature=0.7] ::= [a-z]+"},
		{"lookahead assertion", `root ::= "a" (= "b")`},
		{"TagDispatch macro", "root ::= TagDispatch(\n  (\"<tool_call>\", call),\n  loop_after_dispatch=true,\n  excludes=()\n)\ncall ::= \"{\" [^}]* \"}\""},
		{"Token macros", "root ::= Token(128010) content ExcludeToken(1, 2)\ncontent ::= [a-z]+"},
		{"no space around ::=", `root::="a"`},
		{"empty alternatives (GBNF)", "root ::= \"a\" || \"b\" |\nws ::= | \" \""},
		{"quantifier on the next line", "root ::= \"a\"\n  *"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckEBNF(tc.g, Limits{}); err != nil {
				t.Fatalf("CheckEBNF refused a valid grammar: %v\n%s", err, tc.g)
			}
		})
	}
}

func TestCheckEBNFRejects(t *testing.T) {
	for _, tc := range []struct{ name, g, want string }{
		{"no root", `start ::= "a"`, "no rule named root"},
		{"undefined rule", "root ::= value\nvalu ::= \"x\"", `line 1, column 10: rule "value" is not defined`},
		{"undefined rule in a macro", `root ::= TagDispatch(("<a>", body))`, `line 1, column 30: rule "body" is not defined`},
		{"rule defined twice", "root ::= a\na ::= \"x\"\na ::= \"y\"", `line 3, column 1: rule "a" is defined twice`},
		{"missing ::=", `root = "a"`, `line 1, column 6: unexpected '=' after rule name "root", want ::=`},
		{"empty body", "root ::=\na ::= \"x\"", `rule "root" has an empty body`},
		{"unclosed literal", `root ::= "abc`, `line 1, column 10: string literal is not closed`},
		{"line break in literal", "root ::= \"ab\ncd\"", `line 1, column 13: raw line break in a string literal`},
		{"unclosed class", `root ::= [a-z`, `line 1, column 10: character class is not closed`},
		{"reversed range", `root ::= [z-a]`, `line 1, column 12: range 'z'-'a' is reversed`},
		{"shorthand in class", `root ::= [\d]+`, `line 1, column 11: \d is not supported`},
		{"unknown escape", `root ::= "\q"`, `line 1, column 11: unknown escape \q`},
		{"short u escape", `root ::= "\u12"`, `escape \u wants 4 hex digits`},
		{"beyond Unicode", `root ::= "\x110000"`, `beyond the last Unicode code point`},
		{"unclosed group", `root ::= ("a" | "b"`, `line 1, column 10: group opened here is not closed`},
		{"stray )", `root ::= "a")`, `line 1, column 13: unexpected ')' in rule "root"`},
		{"missing lower bound", `root ::= "a"{,4}`, `want the lower bound of {m,n}`},
		{"bounds reversed", `root ::= "a"{4,2}`, `repetition {4,2} has its lower bound above the upper`},
		{"bound above 10^15", `root ::= "a"{0,9999999999999999}`, `line 1, column 13: repetition bound above 10^15`},
		{"two quantifiers", `root ::= "a"++`, `line 1, column 14: two quantifiers on one item`},
		{"two rules on one line", `root ::= a a ::= "x"`, `line 1, column 12: rule name "a" must begin a line`},
		{"two quantifiers apart", "root ::= \"a\"+ # more\n +", `line 2, column 2: two quantifiers on one item`},
		{"single quotes", `root ::= 'a'`, `line 1, column 10: unexpected '\''`},
		{"name starting with a digit", `1root ::= "a"`, `line 1, column 1: unexpected '1', want a rule name`},
		{"error on line 3", "root ::= a\n\na ::= \"x\" ]", `line 3, column 11: unexpected ']'`},
		{"column counts characters", `root ::= "é" [z-a]`, `line 1, column 16: range`},
		{"size bound", `root ::= "` + strings.Repeat("a", DefaultMaxBytes) + `"`, "over the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckEBNF(tc.g, Limits{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckEBNF = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func hostileEBNF() []hostileDoc {
	var many strings.Builder
	many.WriteString("root ::= r0\n")
	for i := range 100000 {
		many.WriteString("r" + itoa(i) + " ::= \"x\"\n")
	}
	return []hostileDoc{
		{name: "1 MB of (", doc: "root ::= " + strings.Repeat("(", 1<<20)},
		{name: "100k rules", doc: many.String()},
		{name: "1 MB alternatives", doc: "root ::= " + strings.TrimSuffix(strings.Repeat(`"a" | `, 1<<20/6), "| "), accept: true},
		{name: "1 MB of [", doc: "root ::= " + strings.Repeat("[", 1<<20)},
		{name: "1 MB comment", doc: "root ::= \"a\" #" + strings.Repeat("x", 1<<20), accept: true},
		{name: "10k self references", doc: "root ::= " + strings.Repeat("root ", 10000) + `| "a"`, accept: true},
	}
}

func TestCheckEBNFHostile(t *testing.T) {
	for _, h := range hostileEBNF() {
		t.Run(h.name, func(t *testing.T) {
			err := CheckEBNF(h.doc, Limits{MaxBytes: 4 << 20})
			t.Logf("%d bytes: %v", len(h.doc), err)
			if h.accept != (err == nil) {
				t.Fatalf("accept = %v, want %v", err == nil, h.accept)
			}
		})
	}
	for _, tc := range []struct {
		g    string
		lim  Limits
		want string
	}{
		{`root ::= ((("a")))`, Limits{MaxDepth: 2}, "groups nested deeper than 2"},
		{"root ::= a\na ::= b\nb ::= \"x\"", Limits{MaxNodes: 2}, "line 3, column 1: more than 2 rules"},
	} {
		if err := CheckEBNF(tc.g, tc.lim); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckEBNF(%q, %+v) = %v, want %q", tc.g, tc.lim, err, tc.want)
		}
	}
}

func BenchmarkCheckEBNF(b *testing.B) {
	docs := append([]hostileDoc{{name: "json.gbnf style", doc: jsonGrammar}}, hostileEBNF()...)
	for _, d := range docs {
		b.Run(d.name, func(b *testing.B) {
			lim := Limits{MaxBytes: 4 << 20}
			b.SetBytes(int64(len(d.doc)))
			b.ReportAllocs()
			for b.Loop() {
				_ = CheckEBNF(d.doc, lim)
			}
		})
	}
}

func FuzzCheckEBNF(f *testing.F) {
	for _, g := range []string{jsonGrammar, arithmeticGrammar, `root ::= [^]{2,}`, `root ::= TagDispatch(("<a>", b))` + "\nb ::= \"x\"", `root ::= "\x41" | (= "b")`} {
		f.Add(g)
	}
	f.Fuzz(func(t *testing.T, g string) {
		_ = CheckEBNF(g, Limits{})
	})
}

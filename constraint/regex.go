package constraint

import (
	"fmt"
	"regexp/syntax"
	"strconv"
	"strings"
	"unicode/utf8"
)

// CheckRegex reports whether s is a regular expression the engines accept.
// It checks the size bound (Limits.MaxBytes) and the group nesting bound
// (Limits.MaxDepth), then parses s with Go's regexp/syntax in Perl mode, which covers the syntax xgrammar's regex converter reads: literals,
// escapes, classes with ranges and \d \w \s, groups (capturing, (?:...),
// named), alternation, the quantifiers * + ? {m} {m,} {m,n} and their lazy
// forms, and the ^ $ anchors.
//
// Counted repetitions are not held to Go's limits: Go refuses a count above
// 1000 (a{1,2000}) and nested counts whose product passes 1000 (a hostname's
// (\w{1,63}\.){1,127}), which xgrammar and outlines compile. The check
// verifies each count's minimum is not above its maximum itself, then lets
// Go's parser judge the rest of the pattern with every count lowered to at
// most 1. Escapes Go spells otherwise are translated first: \uHHHH and
// \u{H...} (JSON Schema patterns are ECMA-262 regular expressions, and
// xgrammar reads both) and the control escape \cX.
//
// What Go's parser rejects that a Python-regex user may write, and what the
// engines do with it:
//   - lookahead (?=...) (?!...) and lookbehind (?<=...) (?<!...): xgrammar rejects them
//     ("Lookahead is not supported yet." in RegexConverter::HandleGroupModifier,
//     cpp/regex_converter.cc), and llguidance's Rust-regex dialect has none either;
//   - backreferences \1 \k<name>: xgrammar rejects them ("Backreference is not
//     supported yet." in RegexConverter::HandleEscape), and no automaton can match them;
//   - atomic groups (?>...): xgrammar refuses every (?X group modifier but named and
//     non-capturing groups ("Group modifier flag is not supported yet.");
//   - possessive quantifiers a*+: xgrammar refuses them ("Two consecutive repetition
//     modifiers are not allowed.");
//   - Python's \Z end anchor: Go spells it \z; refused here.
//
// Known gaps (accepted here, refused by xgrammar, which may leave the request
// to fail on the engine): word boundaries \b \B, Unicode classes \pL, and
// inline flags such as (?i) ("Group modifier flag is not supported yet.").
// They are accepted because outlines and llguidance take them and the router
// does not know which backend a worker runs.
func CheckRegex(s string, lim Limits) error {
	lim = lim.withDefaults()
	if err := lim.checkSize("the regular expression", s); err != nil {
		return err
	}
	return checkRegex(s, lim)
}

// checkRegex is CheckRegex after the size check; JSON Schema patterns, whose
// size the schema's bound already covers, use it directly.
func checkRegex(s string, lim Limits) error {
	lowered, err := toGoSyntax(s, lim.MaxDepth)
	if err != nil {
		return err
	}
	_, err = syntax.Parse(lowered, syntax.Perl)
	if err == nil {
		return nil
	}
	var se *syntax.Error
	if !asSyntaxError(err, &se) {
		return fmt.Errorf("invalid regular expression: %v", err)
	}
	// Quote the caller's text, not the rewritten one, when the original
	// fails the same way.
	var orig *syntax.Error
	if _, err := syntax.Parse(s, syntax.Perl); lowered != s && asSyntaxError(err, &orig) && orig.Code == se.Code {
		se = orig
	}
	switch {
	case se.Code == syntax.ErrInvalidRepeatOp && (strings.Contains(se.Expr, "*+") || strings.Contains(se.Expr, "++") || strings.Contains(se.Expr, "?+")):
		return fmt.Errorf("invalid regular expression: possessive quantifier %s is not supported", quoteShort(se.Expr))
	case se.Code == syntax.ErrInvalidPerlOp && (strings.HasPrefix(se.Expr, "(?=") || strings.HasPrefix(se.Expr, "(?!")):
		return fmt.Errorf("invalid regular expression: lookahead %s is not supported by the engines", quoteShort(se.Expr))
	case strings.HasPrefix(se.Expr, "(?<=") || strings.HasPrefix(se.Expr, "(?<!"):
		return fmt.Errorf("invalid regular expression: lookbehind %s is not supported by the engines", quoteShort(se.Expr))
	case se.Code == syntax.ErrInvalidPerlOp && strings.HasPrefix(se.Expr, "(?>"):
		return fmt.Errorf("invalid regular expression: atomic group %s is not supported", quoteShort(se.Expr))
	case se.Code == syntax.ErrInvalidEscape && len(se.Expr) == 2 && (se.Expr[1] >= '1' && se.Expr[1] <= '9' || se.Expr[1] == 'k'):
		return fmt.Errorf("invalid regular expression: backreference %s is not supported by the engines", quoteShort(se.Expr))
	}
	return fmt.Errorf("invalid regular expression: %s: %s", se.Code, quoteShort(se.Expr))
}

// quoteShort quotes the part of a pattern an error names, cut to 40 bytes:
// Go's parser may name the whole rest of the pattern, and a message goes
// back in a gRPC status, not a log.
func quoteShort(s string) string {
	if len(s) <= 40 {
		return strconv.Quote(s)
	}
	cut := 40
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

func asSyntaxError(err error, se **syntax.Error) bool {
	e, ok := err.(*syntax.Error)
	if ok {
		*se = e
	}
	return ok
}

// toGoSyntax rewrites what Go's parser reads differently from the engines,
// in one linear pass that also bounds group nesting by maxDepth (Go's parser
// takes a third of a second over 256 KiB of "("): {m}, {m,} and {m,n}
// outside character classes get each
// count lowered to at most 1 (after checking m <= n), and the escapes of
// JavaScript and Python that Go lacks, \uHHHH, \u{H...} and \cX, become
// \x{...}.
func toGoSyntax(s string, maxDepth int) (string, error) {
	var b strings.Builder
	b.Grow(len(s))
	inClass := false
	depth := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '(' && !inClass:
			if depth++; depth > maxDepth {
				return "", fmt.Errorf("invalid regular expression: groups nested deeper than %d, the limit, at byte %d", maxDepth, i)
			}
		case c == ')' && !inClass && depth > 0:
			depth--
		case c == '\\' && i+1 < len(s):
			if n, out := goEscape(s, i); n > 0 {
				b.WriteString(out)
				i += n - 1
				continue
			}
			b.WriteByte(c)
			b.WriteByte(s[i+1])
			i++
			continue
		case inClass:
			if c == ']' {
				inClass = false
			}
		case c == '[':
			inClass = true
			// A ] right after [ or [^ is a literal.
			b.WriteByte(c)
			if i+1 < len(s) && s[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(s) && s[i+1] == ']' {
				b.WriteByte(']')
				i++
			}
			continue
		case c == '{':
			j, out, ok, err := lowerCount(s, i)
			if err != nil {
				return "", err
			}
			if ok {
				b.WriteString(out)
				i = j - 1
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

// goEscape translates the escape at s[i] (a backslash) when Go spells it
// otherwise: \uHHHH and \u{H...} (JSON Schema patterns are ECMA-262 regular
// expressions, and Python has \uHHHH) and \cX, a control character. It
// returns the length read and the replacement, or 0 to keep the escape.
func goEscape(s string, i int) (int, string) {
	rest := s[i+1:]
	isHex := func(c byte) bool {
		return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
	}
	switch {
	case len(rest) >= 5 && rest[0] == 'u' && isHex(rest[1]) && isHex(rest[2]) && isHex(rest[3]) && isHex(rest[4]):
		return 6, `\x{` + rest[1:5] + `}`
	case len(rest) >= 3 && rest[0] == 'u' && rest[1] == '{':
		end := strings.IndexByte(rest, '}')
		if end < 3 {
			return 0, ""
		}
		for k := 2; k < end; k++ {
			if !isHex(rest[k]) {
				return 0, ""
			}
		}
		return end + 2, `\x` + rest[1:end+1]
	case len(rest) >= 2 && rest[0] == 'c' && (rest[1] >= 'a' && rest[1] <= 'z' || rest[1] >= 'A' && rest[1] <= 'Z'):
		return 3, fmt.Sprintf(`\x{%02x}`, rest[1]%32)
	}
	return 0, ""
}

// lowerCount reads a repeat {m}, {m,} or {m,n} at s[i] (digits only, as Go
// and Python read one) and returns the index after it and the lowered text.
func lowerCount(s string, i int) (int, string, bool, error) {
	j := i + 1
	num := func() (string, bool) {
		start := j
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		return s[start:j], j > start
	}
	lower := func(n string) string {
		if strings.TrimLeft(n, "0") == "" {
			return "0"
		}
		return "1"
	}
	lo, ok := num()
	if !ok {
		return 0, "", false, nil
	}
	out := "{" + lower(lo)
	hi, haveHi := "", false
	if j < len(s) && s[j] == ',' {
		j++
		out += ","
		if hi, haveHi = num(); haveHi {
			out += lower(hi)
		}
	}
	if j >= len(s) || s[j] != '}' {
		return 0, "", false, nil
	}
	if haveHi && compareDecimal(lo, hi) > 0 {
		return 0, "", false, fmt.Errorf("invalid regular expression: invalid repeat count: %q has its minimum above its maximum", s[i:j+1])
	}
	return j + 1, out + "}", true, nil
}

// compareDecimal compares two strings of decimal digits by value, whatever
// their length, so that no count overflows.
func compareDecimal(a, b string) int {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

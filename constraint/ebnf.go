package constraint

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// CheckEBNF reports whether s is a grammar in the xgrammar EBNF dialect, which
// is compatible with llama.cpp's GBNF:
//
//	root  ::= value (ws "," ws value)*     # a comment runs to the end of the line
//	value ::= [0-9]+ | "\"" [^"\\]* "\""
//	ws    ::= [ \t\n]{0,8}
//
// Accepted: rules name ::= expression, with names of letters, digits, _ - and
// . not starting with a digit; a rule named root; alternatives |, sequences,
// groups ( ) (the empty group too); string literals "..." with the escapes
// \" \\ \/ \' \? \n \r \t \b \f \a \v \0 \e \xHH... \uHHHH \UHHHHHHHH;
// character classes [a-z] [^"\\] [^] with the same escapes and \^ \$ \. \*
// \+ \( \) \[ \] \{ \} \| \- escaped; the quantifiers * + ? {m} {m,} {m,n};
// # comments; rule options (value[temperature=0.7] ::= ...); the lookahead
// assertion (= ...); and xgrammar's macros TagDispatch, TokenTagDispatch,
// Token and ExcludeToken, whose rule arguments must be defined. Line breaks
// are insignificant, but a rule name must begin a line (xgrammar's lexer
// requires it): a rule ends where the next name ::= begins. Empty
// alternatives (ws ::= | " ") are accepted, as llama.cpp's GBNF takes them.
//
// Rejected, with the line and column: syntax errors, a raw newline inside a
// literal or a class, \d \w \s inside a class (xgrammar rejects them), an
// inverted range [z-a], {,n} (xgrammar requires the lower bound), two
// quantifiers on one item ("a"++), {m,n} with m > n, a rule defined twice, a
// reference to an undefined rule, a missing root rule, and grammars over the
// limits (bytes, group nesting, rule count).
//
// Sources checked with the search tool: xgrammar's
// docs/defining_structures/ebnf_grammar.md (names, escapes, classes, {m,n},
// rule options, TagDispatch and token macros, "EBNF parser error at line 1,
// column 10") and llama.cpp's grammars/README.md ("GBNF Guide": rules,
// literals, classes, * + ? {m,n}, # comments).
//
// Known gaps: xgrammar's parser (cpp/grammar_parser.cc) wants at least one
// element in every alternative, so it refuses the empty alternatives GBNF
// allows (write "" instead); the lookahead assertion is accepted anywhere,
// where xgrammar takes it only at the end of a rule; columns count
// characters where xgrammar's count bytes; xgrammar's macro arguments are
// checked only for balance and for their rule references. Left recursion is
// accepted (xgrammar supports it; llama.cpp refuses it, which does not matter
// because neither engine runs llama.cpp's parser). Repetition bounds up to
// 10^15 (xgrammar's limit) are accepted; xgrammar compiles large ones with a
// counter rather than by unrolling, so they are not a compile-time bomb.
func CheckEBNF(s string, lim Limits) error {
	lim = lim.withDefaults()
	if err := lim.checkSize("the grammar", s); err != nil {
		return err
	}
	p := &ebnfParser{s: s, lim: lim, defined: map[string]bool{}}
	if err := p.grammar(); err != nil {
		return err
	}
	if !p.defined["root"] {
		return fmt.Errorf("grammar has no rule named root, the rule generation starts from")
	}
	for _, r := range p.refs {
		if !p.defined[r.name] {
			return p.errorAt(r.pos, "rule %s is not defined", quoteShort(r.name))
		}
	}
	return nil
}

type ebnfRef struct {
	name string
	pos  int
}

type ebnfParser struct {
	s       string
	pos     int
	lim     Limits
	defined map[string]bool
	refs    []ebnfRef
	tokEnd  int // where the last token of the current rule's body ended
}

func (p *ebnfParser) errorAt(pos int, format string, args ...any) error {
	line, col := lineCol(p.s, pos)
	return fmt.Errorf("grammar line %d, column %d: %s", line, col, fmt.Sprintf(format, args...))
}

func (p *ebnfParser) errorf(format string, args ...any) error {
	return p.errorAt(p.pos, format, args...)
}

func (p *ebnfParser) found() string {
	if p.pos >= len(p.s) {
		return "end of grammar"
	}
	r, _ := utf8.DecodeRuneInString(p.s[p.pos:])
	return strconv.QuoteRune(r)
}

// skip passes white space, line breaks and comments.
func (p *ebnfParser) skip() {
	for p.pos < len(p.s) {
		switch p.s[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		case '#':
			if i := strings.IndexByte(p.s[p.pos:], '\n'); i >= 0 {
				p.pos += i + 1
			} else {
				p.pos = len(p.s)
			}
		default:
			return
		}
	}
}

func isNameStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '-' || c == '.'
}

func isNameChar(c byte) bool { return isNameStart(c) || c >= '0' && c <= '9' }

// name reads a rule name at p.pos, or returns "".
func (p *ebnfParser) name() string {
	if p.pos >= len(p.s) || !isNameStart(p.s[p.pos]) {
		return ""
	}
	start := p.pos
	for p.pos < len(p.s) && isNameChar(p.s[p.pos]) {
		p.pos++
	}
	return p.s[start:p.pos]
}

// atRuleStart reports whether a rule definition (name, options, ::=) starts
// at p.pos, without moving.
func (p *ebnfParser) atRuleStart() bool {
	save := p.pos
	defer func() { p.pos = save }()
	if p.name() == "" {
		return false
	}
	p.skip()
	if p.pos < len(p.s) && p.s[p.pos] == '[' {
		if p.options() != nil {
			return false
		}
		p.skip()
	}
	return strings.HasPrefix(p.s[p.pos:], "::=")
}

func (p *ebnfParser) grammar() error {
	rules := 0
	for {
		p.skip()
		if p.pos >= len(p.s) {
			return nil
		}
		start := p.pos
		name := p.name()
		if name == "" {
			return p.errorf("unexpected %s, want a rule name", p.found())
		}
		if rules++; rules > p.lim.MaxNodes {
			return p.errorAt(start, "more than %d rules", p.lim.MaxNodes)
		}
		if rules > 1 && !strings.ContainsAny(p.s[p.tokEnd:start], "\n\r") {
			return p.errorAt(start, "rule name %s must begin a line", quoteShort(name))
		}
		if p.defined[name] {
			return p.errorAt(start, "rule %s is defined twice", quoteShort(name))
		}
		p.defined[name] = true
		p.skip()
		if p.pos < len(p.s) && p.s[p.pos] == '[' {
			if err := p.options(); err != nil {
				return err
			}
			p.skip()
		}
		if !strings.HasPrefix(p.s[p.pos:], "::=") {
			return p.errorf("unexpected %s after rule name %s, want ::=", p.found(), quoteShort(name))
		}
		p.pos += 3
		p.skip()
		if p.pos >= len(p.s) || p.atRuleStart() {
			return p.errorf("rule %s has an empty body (write \"\" for the empty string)", quoteShort(name))
		}
		if err := p.alternatives(1); err != nil {
			return err
		}
		p.skip()
		if p.pos < len(p.s) && !p.atRuleStart() {
			return p.errorf("unexpected %s in rule %s", p.found(), quoteShort(name))
		}
	}
}

// options reads rule options such as [temperature=0.7].
func (p *ebnfParser) options() error {
	p.pos++ // [
	for {
		p.skip()
		if p.name() == "" {
			return p.errorf("unexpected %s, want a rule option name", p.found())
		}
		p.skip()
		if p.pos >= len(p.s) || p.s[p.pos] != '=' {
			return p.errorf("unexpected %s, want = after a rule option", p.found())
		}
		p.pos++
		p.skip()
		start := p.pos
		for p.pos < len(p.s) && (isNameChar(p.s[p.pos]) || p.s[p.pos] == '+') {
			p.pos++
		}
		if p.pos == start {
			return p.errorf("unexpected %s, want a rule option value", p.found())
		}
		p.skip()
		if p.pos < len(p.s) && p.s[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.pos < len(p.s) && p.s[p.pos] == ']' {
			p.pos++
			return nil
		}
		return p.errorf("unexpected %s in rule options, want , or ]", p.found())
	}
}

// alternatives reads seq ("|" seq)*. depth counts open groups.
func (p *ebnfParser) alternatives(depth int) error {
	for {
		if err := p.sequence(depth); err != nil {
			return err
		}
		p.skip()
		if p.pos < len(p.s) && p.s[p.pos] == '|' {
			p.pos++
			p.skip()
			continue
		}
		return nil
	}
}

// sequence reads items until |, ), the end, or the next rule.
func (p *ebnfParser) sequence(depth int) error {
	for {
		p.skip()
		if p.pos >= len(p.s) || p.s[p.pos] == '|' || p.s[p.pos] == ')' || p.atRuleStart() {
			return nil
		}
		if err := p.item(depth); err != nil {
			return err
		}
	}
}

func (p *ebnfParser) item(depth int) error {
	if err := p.primary(depth); err != nil {
		return err
	}
	p.tokEnd = p.pos
	// A quantifier may follow after white space, line breaks or comments:
	// xgrammar's lexer drops them all between tokens.
	p.skip()
	if p.pos >= len(p.s) || strings.IndexByte("*+?{", p.s[p.pos]) < 0 {
		return nil
	}
	if p.s[p.pos] == '{' {
		if err := p.repeatRange(); err != nil {
			return err
		}
	} else {
		p.pos++
	}
	p.tokEnd = p.pos
	p.skip()
	if p.pos < len(p.s) && strings.IndexByte("*+?{", p.s[p.pos]) >= 0 {
		return p.errorf("two quantifiers on one item; wrap the item in ( ) first")
	}
	return nil
}

func (p *ebnfParser) primary(depth int) error {
	c := p.s[p.pos]
	switch {
	case c == '"':
		return p.literal()
	case c == '[':
		return p.class()
	case c == '(':
		if depth >= p.lim.MaxDepth {
			return p.errorf("groups nested deeper than %d", p.lim.MaxDepth)
		}
		open := p.pos
		p.pos++
		p.skip()
		if p.pos < len(p.s) && p.s[p.pos] == '=' { // lookahead assertion (= ...)
			p.pos++
		}
		if err := p.alternatives(depth + 1); err != nil {
			return err
		}
		p.skip()
		if p.pos >= len(p.s) || p.s[p.pos] != ')' {
			return p.errorAt(open, "group opened here is not closed (found %s)", p.found())
		}
		p.pos++
		return nil
	case isNameStart(c):
		start := p.pos
		name := p.name()
		if p.pos < len(p.s) && p.s[p.pos] == '(' && isMacro(name) {
			return p.macroArgs(depth)
		}
		p.refs = append(p.refs, ebnfRef{name, start})
		return nil
	}
	return p.errorf("unexpected %s, want a literal, a class, a rule name or (", p.found())
}

func isMacro(name string) bool {
	switch name {
	case "TagDispatch", "TokenTagDispatch", "Token", "ExcludeToken":
		return true
	}
	return false
}

// macroArgs reads the parenthesized arguments of an xgrammar macro: strings,
// numbers, names (rule references unless followed by =, true, false),
// nested tuples. p.s[p.pos] is the opening parenthesis.
func (p *ebnfParser) macroArgs(depth int) error {
	open := p.pos
	p.pos++
	level := 1
	for level > 0 {
		p.skip()
		if p.pos >= len(p.s) {
			return p.errorAt(open, "macro arguments opened here are not closed")
		}
		switch c := p.s[p.pos]; {
		case c == '(':
			if depth+level >= p.lim.MaxDepth {
				return p.errorf("groups nested deeper than %d", p.lim.MaxDepth)
			}
			level++
			p.pos++
		case c == ')':
			level--
			p.pos++
		case c == ',' || c == '=':
			p.pos++
		case c == '"':
			if err := p.literal(); err != nil {
				return err
			}
		case c >= '0' && c <= '9':
			for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
				p.pos++
			}
		case isNameStart(c):
			start := p.pos
			name := p.name()
			p.skip()
			if name != "true" && name != "false" && (p.pos >= len(p.s) || p.s[p.pos] != '=') {
				p.refs = append(p.refs, ebnfRef{name, start})
			}
		default:
			return p.errorf("unexpected %s in macro arguments", p.found())
		}
	}
	return nil
}

// repeatRange reads {m}, {m,} or {m,n}.
func (p *ebnfParser) repeatRange() error {
	open := p.pos
	p.pos++
	num := func() (int64, bool) {
		p.skip()
		start := p.pos
		for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
			p.pos++
		}
		if p.pos == start {
			return 0, false
		}
		n, err := strconv.ParseInt(p.s[start:p.pos], 10, 64)
		if err != nil || n > 1e15 {
			n = -1 // reported by the caller
		}
		return n, true
	}
	lo, ok := num()
	if !ok {
		return p.errorf("unexpected %s, want the lower bound of {m,n} (write {0,n} for at most n)", p.found())
	}
	if lo < 0 {
		return p.errorAt(open, "repetition bound above 10^15, xgrammar's limit")
	}
	p.skip()
	if p.pos < len(p.s) && p.s[p.pos] == ',' {
		p.pos++
		hi, ok := num()
		if ok && hi < 0 {
			return p.errorAt(open, "repetition bound above 10^15, xgrammar's limit")
		}
		if ok && hi < lo {
			return p.errorAt(open, "repetition {%d,%d} has its lower bound above the upper", lo, hi)
		}
		p.skip()
	}
	if p.pos >= len(p.s) || p.s[p.pos] != '}' {
		return p.errorf("unexpected %s, want } to close the repetition", p.found())
	}
	p.pos++
	return nil
}

// literal reads "..." with escapes.
func (p *ebnfParser) literal() error {
	open := p.pos
	p.pos++
	for {
		if p.pos >= len(p.s) {
			return p.errorAt(open, "string literal is not closed")
		}
		switch c := p.s[p.pos]; c {
		case '"':
			p.pos++
			return nil
		case '\n', '\r':
			return p.errorf("raw line break in a string literal; write \\n")
		case '\\':
			if _, err := p.escape(false); err != nil {
				return err
			}
		default:
			if err := p.char(); err != nil {
				return err
			}
		}
	}
}

// char passes one UTF-8 character.
func (p *ebnfParser) char() error {
	r, n := utf8.DecodeRuneInString(p.s[p.pos:])
	if r == utf8.RuneError && n == 1 {
		return p.errorf("invalid UTF-8")
	}
	p.pos += n
	return nil
}

// class reads [...] or [^...].
func (p *ebnfParser) class() error {
	open := p.pos
	p.pos++
	if p.pos < len(p.s) && p.s[p.pos] == '^' {
		p.pos++
	}
	prev, havePrev := rune(-1), false
	for {
		if p.pos >= len(p.s) {
			return p.errorAt(open, "character class is not closed")
		}
		c := p.s[p.pos]
		if c == ']' {
			p.pos++
			return nil
		}
		if c == '\n' || c == '\r' {
			return p.errorf("raw line break in a character class; write \\n")
		}
		if c == '-' && havePrev && p.pos+1 < len(p.s) && p.s[p.pos+1] != ']' {
			dash := p.pos
			p.pos++
			hi, err := p.classChar()
			if err != nil {
				return err
			}
			if hi < prev {
				return p.errorAt(dash, "range %s-%s is reversed", strconv.QuoteRune(prev), strconv.QuoteRune(hi))
			}
			havePrev = false
			continue
		}
		r, err := p.classChar()
		if err != nil {
			return err
		}
		prev, havePrev = r, true
	}
}

// classChar reads one character or escape inside a class.
func (p *ebnfParser) classChar() (rune, error) {
	if p.pos >= len(p.s) {
		return 0, p.errorf("character class is not closed")
	}
	if p.s[p.pos] == '\\' {
		return p.escape(true)
	}
	r, n := utf8.DecodeRuneInString(p.s[p.pos:])
	if r == utf8.RuneError && n == 1 {
		return 0, p.errorf("invalid UTF-8")
	}
	p.pos += n
	return r, nil
}

// escape reads a backslash escape and returns the character it stands for.
func (p *ebnfParser) escape(inClass bool) (rune, error) {
	start := p.pos
	if p.pos+1 >= len(p.s) {
		return 0, p.errorf("escape at the end of the grammar")
	}
	e := p.s[p.pos+1]
	p.pos += 2
	switch e {
	case '"', '\\', '/', '\'', '?':
		return rune(e), nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'a':
		return '\a', nil
	case 'v':
		return '\v', nil
	case '0':
		return 0, nil
	case 'e':
		return 0x1b, nil
	}
	if inClass && strings.IndexByte("^$.*+()[]{}|-", e) >= 0 {
		return rune(e), nil
	}
	hexDigits := func(min, max int) (rune, error) {
		begin := p.pos
		for p.pos < len(p.s) && p.pos-begin < max && strings.IndexByte("0123456789abcdefABCDEF", p.s[p.pos]) >= 0 {
			p.pos++
		}
		if p.pos-begin < min {
			return 0, p.errorAt(start, "escape \\%c wants %d hex digits", e, min)
		}
		n, err := strconv.ParseUint(p.s[begin:p.pos], 16, 64)
		if err != nil || n > utf8.MaxRune {
			return 0, p.errorAt(start, "escape %s is beyond the last Unicode code point", p.s[start:p.pos])
		}
		return rune(n), nil
	}
	switch e {
	case 'x':
		return hexDigits(1, 8)
	case 'u':
		return hexDigits(4, 4)
	case 'U':
		return hexDigits(8, 8)
	case 'd', 'w', 's', 'D', 'W', 'S':
		return 0, p.errorAt(start, "\\%c is not supported; write the characters out, e.g. [0-9] for \\d", e)
	}
	r, _ := utf8.DecodeRuneInString(p.s[start+1:])
	return 0, p.errorAt(start, "unknown escape \\%c", r)
}

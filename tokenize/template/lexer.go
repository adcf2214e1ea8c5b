package template

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The lexer follows jinja2.lexer.Lexer with trim_blocks=True and
// lstrip_blocks=True. Whitespace control is settled here, as in Jinja:
//
//   - "{%-", "{{-", "{#-" strip all whitespace before the tag;
//   - "-%}", "-}}", "-#}" strip all whitespace after it;
//   - trim_blocks: a block or comment end "%}"/"#}" eats one following "\n";
//     "+%}" keeps it;
//   - lstrip_blocks: spaces and tabs between the start of a line and a block
//     or comment tag are removed; "{%+" keeps them. Variable tags "{{" are
//     never lstripped.

type tokType uint8

const (
	tEOF tokType = iota
	tData
	tVarBegin
	tVarEnd
	tBlockBegin
	tBlockEnd
	tName
	tString
	tInt
	tFloat
	tOp
)

type token struct {
	typ  tokType
	val  string // data text, name, decoded string, operator
	num  any    // int64 or float64 for number tokens
	line int
}

func (t token) String() string {
	switch t.typ {
	case tEOF:
		return "end of template"
	case tData:
		return "template data"
	case tVarBegin:
		return "'{{'"
	case tVarEnd:
		return "end of print statement"
	case tBlockBegin:
		return "'{%'"
	case tBlockEnd:
		return "end of statement block"
	case tString:
		return "string"
	case tInt, tFloat:
		return "number"
	}
	return "'" + t.val + "'"
}

// SyntaxError is a template that does not parse. Line is 1-based.
type SyntaxError struct {
	Line int
	Msg  string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("template: syntax error on line %d: %s", e.Line, e.Msg)
}

type lexer struct {
	src          string
	pos          int
	line         int
	lineStarting bool
	toks         []token
}

// normalizeNewlines turns \r\n and \r into \n and drops one trailing
// newline (keep_trailing_newline=False), as Jinja does before lexing.
func normalizeNewlines(src string) string {
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

func lex(source string) ([]token, error) {
	lx := &lexer{src: normalizeNewlines(source), line: 1, lineStarting: true}
	if err := lx.run(); err != nil {
		return nil, err
	}
	lx.toks = append(lx.toks, token{typ: tEOF, line: lx.line})
	return lx.toks, nil
}

func (lx *lexer) fail(msg string, args ...any) error {
	return &SyntaxError{Line: lx.line, Msg: fmt.Sprintf(msg, args...)}
}

func (lx *lexer) emit(t tokType, val string) {
	lx.toks = append(lx.toks, token{typ: t, val: val, line: lx.line})
}

// advance moves past n bytes, counting lines, and records whether the
// consumed text ended a line (Jinja's line_starting).
func (lx *lexer) advance(n int) {
	s := lx.src[lx.pos : lx.pos+n]
	lx.line += strings.Count(s, "\n")
	lx.pos += n
	lx.lineStarting = n > 0 && s[n-1] == '\n'
}

// nextTag finds the next "{{", "{%" or "{#" at or after from.
func (lx *lexer) nextTag(from int) int {
	for i := from; ; {
		j := strings.IndexByte(lx.src[i:], '{')
		if j < 0 || i+j+1 >= len(lx.src) {
			return -1
		}
		i += j
		switch lx.src[i+1] {
		case '{', '%', '#':
			return i
		}
		i++
	}
}

// stripBefore applies "-" and lstrip_blocks to the text preceding a tag.
func (lx *lexer) stripBefore(text string, sign byte, lstrip bool) string {
	if sign == '-' {
		return strings.TrimRightFunc(text, pyIsSpace)
	}
	if sign != '+' && lstrip {
		lpos := strings.LastIndexByte(text, '\n') + 1
		if lpos > 0 || lx.lineStarting {
			if strings.TrimLeft(text[lpos:], " \t") == "" {
				return text[:lpos]
			}
		}
	}
	return text
}

func (lx *lexer) run() error {
	for lx.pos < len(lx.src) {
		at := lx.nextTag(lx.pos)
		if at < 0 {
			lx.emit(tData, lx.src[lx.pos:])
			lx.advance(len(lx.src) - lx.pos)
			return nil
		}
		kind := lx.src[at+1]
		var sign byte
		if at+2 < len(lx.src) && (lx.src[at+2] == '-' || lx.src[at+2] == '+') {
			sign = lx.src[at+2]
		}
		text := lx.src[lx.pos:at]
		if kind == '%' {
			if rawEnd, ok := lx.matchRawBegin(at); ok {
				if t := lx.stripBefore(text, sign, true); t != "" {
					lx.emit(tData, t)
				}
				lx.advance(rawEnd - lx.pos)
				if err := lx.lexRaw(); err != nil {
					return err
				}
				continue
			}
		}
		if t := lx.stripBefore(text, sign, kind != '{'); t != "" {
			lx.emit(tData, t)
		}
		lx.line += strings.Count(text, "\n")
		lx.pos = at
		open := 2
		if sign != 0 {
			open = 3
		}
		switch kind {
		case '#':
			if err := lx.lexComment(at + open); err != nil {
				return err
			}
		case '%':
			lx.emit(tBlockBegin, "")
			lx.pos = at + open
			if err := lx.lexExpr('%'); err != nil {
				return err
			}
		case '{':
			lx.emit(tVarBegin, "")
			lx.pos = at + open
			if err := lx.lexExpr('}'); err != nil {
				return err
			}
		}
	}
	return nil
}

// blockEndLen reports whether a block/comment end ("+%}", "-%}\s*", "%}\n?")
// starts at i, and how long it is. end is '%' or '#'.
func (lx *lexer) blockEndLen(i int, end byte) (int, bool) {
	s := lx.src[i:]
	switch {
	case len(s) >= 3 && s[0] == '+' && s[1] == end && s[2] == '}':
		return 3, true
	case len(s) >= 3 && s[0] == '-' && s[1] == end && s[2] == '}':
		return 3 + leadingSpaceLen(s[3:]), true
	case len(s) >= 2 && s[0] == end && s[1] == '}':
		if len(s) > 2 && s[2] == '\n' {
			return 3, true
		}
		return 2, true
	}
	return 0, false
}

func leadingSpaceLen(s string) int {
	return len(s) - len(strings.TrimLeftFunc(s, pyIsSpace))
}

func (lx *lexer) lexComment(from int) error {
	for i := from; i < len(lx.src); i++ {
		if n, ok := lx.blockEndLen(i, '#'); ok {
			lx.advance(i + n - lx.pos)
			return nil
		}
	}
	return lx.fail("missing end of comment tag")
}

// matchRawBegin matches "{%[-+]? raw [-]?%}" at i and returns where it ends.
func (lx *lexer) matchRawBegin(i int) (int, bool) {
	j := i + 2
	if j < len(lx.src) && (lx.src[j] == '-' || lx.src[j] == '+') {
		j++
	}
	j += leadingSpaceLen(lx.src[j:])
	if !strings.HasPrefix(lx.src[j:], "raw") {
		return 0, false
	}
	j += 3
	j += leadingSpaceLen(lx.src[j:])
	switch {
	case strings.HasPrefix(lx.src[j:], "-%}"):
		j += 3
		return j + leadingSpaceLen(lx.src[j:]), true
	case strings.HasPrefix(lx.src[j:], "%}"):
		return j + 2, true
	}
	return 0, false
}

// lexRaw scans the body of a raw block up to its endraw tag.
func (lx *lexer) lexRaw() error {
	for i := lx.pos; ; {
		at := strings.Index(lx.src[i:], "{%")
		if at < 0 {
			return lx.fail("missing end of raw directive")
		}
		at += i
		j := at + 2
		var sign byte
		if j < len(lx.src) && (lx.src[j] == '-' || lx.src[j] == '+') {
			sign = lx.src[j]
			j++
		}
		j += leadingSpaceLen(lx.src[j:])
		if strings.HasPrefix(lx.src[j:], "endraw") {
			k := j + 6
			k += leadingSpaceLen(lx.src[k:])
			if n, ok := lx.blockEndLen(k, '%'); ok {
				if t := lx.stripBefore(lx.src[lx.pos:at], sign, true); t != "" {
					lx.emit(tData, t)
				}
				lx.advance(k + n - lx.pos)
				return nil
			}
		}
		i = at + 2
	}
}

var operators3 = []string{"//", "**", "==", "!=", ">=", "<="}

// lexExpr tokenizes the inside of a {{ }} (end='}') or {% %} (end='%') tag.
func (lx *lexer) lexExpr(end byte) error {
	depth := 0
	for {
		if lx.pos >= len(lx.src) {
			return lx.fail("unexpected end of template, expected end of tag")
		}
		if depth == 0 {
			if end == '%' {
				if n, ok := lx.blockEndLen(lx.pos, '%'); ok {
					lx.emit(tBlockEnd, "")
					lx.advance(n)
					return nil
				}
			} else {
				s := lx.src[lx.pos:]
				if strings.HasPrefix(s, "-}}") {
					lx.emit(tVarEnd, "")
					lx.advance(3 + leadingSpaceLen(s[3:]))
					return nil
				}
				if strings.HasPrefix(s, "}}") {
					lx.emit(tVarEnd, "")
					lx.advance(2)
					return nil
				}
			}
		}
		s := lx.src[lx.pos:]
		c := s[0]
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case pyIsSpace(r):
			lx.advance(leadingSpaceLen(s))
		case c >= '0' && c <= '9':
			if err := lx.lexNumber(); err != nil {
				return err
			}
		case c == '_' || unicode.IsLetter(r):
			n := size
			for n < len(s) {
				r2, sz := utf8.DecodeRuneInString(s[n:])
				if r2 != '_' && !unicode.IsLetter(r2) && !unicode.IsDigit(r2) {
					break
				}
				n += sz
			}
			lx.emit(tName, s[:n])
			lx.advance(n)
		case c == '\'' || c == '"':
			if err := lx.lexString(c); err != nil {
				return err
			}
		default:
			op := ""
			for _, o := range operators3 {
				if strings.HasPrefix(s, o) {
					op = o
					break
				}
			}
			if op == "" {
				if !strings.ContainsRune("+-/*%~[](){}><=.:|,;", rune(c)) {
					return lx.fail("unexpected char %q", r)
				}
				op = s[:1]
			}
			switch op {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				if depth == 0 {
					return lx.fail("unexpected '%s'", op)
				}
				depth--
			}
			lx.emit(tOp, op)
			lx.advance(len(op))
		}
	}
}

func digitsLen(s string) int {
	n := 0
	for n < len(s) && (s[n] >= '0' && s[n] <= '9' || s[n] == '_' && n+1 < len(s) && s[n+1] >= '0' && s[n+1] <= '9' && n > 0) {
		n++
	}
	return n
}

func (lx *lexer) lexNumber() error {
	s := lx.src[lx.pos:]
	n := digitsLen(s)
	isFloat := false
	if n+1 < len(s) && s[n] == '.' && s[n+1] >= '0' && s[n+1] <= '9' {
		isFloat = true
		n++
		n += digitsLen(s[n:])
	}
	if n < len(s) && (s[n] == 'e' || s[n] == 'E') {
		m := n + 1
		if m < len(s) && (s[m] == '+' || s[m] == '-') {
			m++
		}
		if d := digitsLen(s[m:]); d > 0 {
			isFloat = true
			n = m + d
		}
	}
	text := strings.ReplaceAll(s[:n], "_", "")
	if isFloat {
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return lx.fail("bad number %q", s[:n])
		}
		lx.toks = append(lx.toks, token{typ: tFloat, val: s[:n], num: f, line: lx.line})
	} else {
		i, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return lx.fail("bad number %q", s[:n])
		}
		lx.toks = append(lx.toks, token{typ: tInt, val: s[:n], num: i, line: lx.line})
	}
	lx.advance(n)
	return nil
}

func (lx *lexer) lexString(q byte) error {
	s := lx.src[lx.pos:]
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case q:
			val, err := unescapePython(s[1:i])
			if err != nil {
				return lx.fail("%v", err)
			}
			lx.toks = append(lx.toks, token{typ: tString, val: val, line: lx.line})
			lx.advance(i + 1)
			return nil
		}
	}
	return lx.fail("unterminated string")
}

// unescapePython decodes backslash escapes as Python's "unicode-escape"
// codec does (Jinja decodes string literals that way). Unknown escapes are
// kept verbatim.
func unescapePython(s string) (string, error) {
	if strings.IndexByte(s, '\\') < 0 {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := s[i]; e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+n >= len(s) {
				return "", fmt.Errorf("truncated \\%c escape", e)
			}
			v, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32)
			if err != nil {
				return "", fmt.Errorf("bad \\%c escape", e)
			}
			b.WriteRune(rune(v))
			i += n
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := 0
			j := i
			for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
				v = v*8 + int(s[j]-'0')
				j++
			}
			b.WriteRune(rune(v))
			i = j - 1
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), nil
}

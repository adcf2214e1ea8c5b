package constraint

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// The checks parse JSON with this small parser instead of encoding/json for
// three reasons: it counts values and nesting as it goes, so a hostile
// document is refused at the first value over the bound rather than after it
// has been decoded; it keeps object members in their order, which the tool
// schemas must preserve (property order steers what the model writes first);
// and its errors carry a line and column.

type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNumber
	jString
	jArray
	jObject
)

func (k jkind) String() string {
	return [...]string{"null", "a boolean", "a number", "a string", "an array", "an object"}[k]
}

// jval is one parsed JSON value.
type jval struct {
	kind jkind
	b    bool
	str  string // the decoded string, or the number's text as written
	arr  []*jval
	obj  []jmember
}

type jmember struct {
	key string
	val *jval
}

// get returns the value of key, the last one when a key repeats (as Python's
// json module, which the engines use, keeps the last).
func (v *jval) get(key string) *jval {
	if v == nil || v.kind != jObject {
		return nil
	}
	for i := len(v.obj) - 1; i >= 0; i-- {
		if v.obj[i].key == key {
			return v.obj[i].val
		}
	}
	return nil
}

// num returns the value of a number.
func (v *jval) num() float64 {
	f, _ := strconv.ParseFloat(v.str, 64)
	return f
}

// describe names a value for a message: the value itself when short.
func (v *jval) describe() string {
	switch v.kind {
	case jString:
		if len(v.str) <= 40 {
			return strconv.Quote(v.str)
		}
		return "a string"
	case jNumber:
		if len(v.str) <= 40 {
			return v.str
		}
		return "a number"
	case jBool:
		return strconv.FormatBool(v.b)
	}
	return v.kind.String()
}

// jparser parses one JSON document within Limits.
type jparser struct {
	s     string
	pos   int
	lim   Limits
	nodes int
}

// parseJSON parses s as exactly one JSON value with nothing but white space
// after it.
func parseJSON(s string, lim Limits) (*jval, error) {
	p := &jparser{s: s, lim: lim}
	p.skipSpace()
	v, err := p.value(1)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos < len(p.s) {
		return nil, p.errorf("unexpected %s after the JSON value", p.peekDesc())
	}
	return v, nil
}

// lineCol turns a byte offset into a 1-based line and column, the column
// counted in characters as an editor shows it. It runs only on an error.
func lineCol(s string, off int) (line, col int) {
	line = 1 + strings.Count(s[:off], "\n")
	col = 1 + utf8.RuneCountInString(s[strings.LastIndexByte(s[:off], '\n')+1:off])
	return line, col
}

func (p *jparser) errorf(format string, args ...any) error {
	line, col := lineCol(p.s, p.pos)
	return fmt.Errorf("invalid JSON at line %d, column %d: %s", line, col, fmt.Sprintf(format, args...))
}

// boundf reports a document that is valid as far as it was read but over a
// bound; calling it invalid JSON would send the caller looking for a typo.
func (p *jparser) boundf(format string, args ...any) error {
	line, col := lineCol(p.s, p.pos)
	return fmt.Errorf("JSON at line %d, column %d: %s", line, col, fmt.Sprintf(format, args...))
}

func (p *jparser) peekDesc() string {
	if p.pos >= len(p.s) {
		return "end of input"
	}
	r, _ := utf8.DecodeRuneInString(p.s[p.pos:])
	return strconv.QuoteRune(r)
}

func (p *jparser) skipSpace() {
	for p.pos < len(p.s) {
		switch p.s[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jparser) value(depth int) (*jval, error) {
	p.nodes++
	if p.nodes > p.lim.MaxNodes {
		return nil, p.boundf("more than %d values, the limit", p.lim.MaxNodes)
	}
	if p.pos >= len(p.s) {
		return nil, p.errorf("unexpected end of input, want a value")
	}
	switch c := p.s[p.pos]; {
	case c == '{' || c == '[':
		if depth > p.lim.MaxDepth {
			return nil, p.boundf("nesting deeper than %d, the limit", p.lim.MaxDepth)
		}
		if c == '{' {
			return p.object(depth)
		}
		return p.array(depth)
	case c == '"':
		str, err := p.string()
		if err != nil {
			return nil, err
		}
		return &jval{kind: jString, str: str}, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case strings.HasPrefix(p.s[p.pos:], "true"):
		p.pos += 4
		return &jval{kind: jBool, b: true}, nil
	case strings.HasPrefix(p.s[p.pos:], "false"):
		p.pos += 5
		return &jval{kind: jBool}, nil
	case strings.HasPrefix(p.s[p.pos:], "null"):
		p.pos += 4
		return &jval{kind: jNull}, nil
	}
	return nil, p.errorf("unexpected %s, want a value", p.peekDesc())
}

func (p *jparser) object(depth int) (*jval, error) {
	p.pos++ // {
	v := &jval{kind: jObject}
	p.skipSpace()
	if p.pos < len(p.s) && p.s[p.pos] == '}' {
		p.pos++
		return v, nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.s) || p.s[p.pos] != '"' {
			return nil, p.errorf("unexpected %s, want a member name in double quotes", p.peekDesc())
		}
		key, err := p.string()
		if err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.pos >= len(p.s) || p.s[p.pos] != ':' {
			return nil, p.errorf("unexpected %s, want ':' after a member name", p.peekDesc())
		}
		p.pos++
		p.skipSpace()
		val, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		v.obj = append(v.obj, jmember{key, val})
		p.skipSpace()
		if p.pos < len(p.s) && p.s[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.pos < len(p.s) && p.s[p.pos] == '}' {
			p.pos++
			return v, nil
		}
		return nil, p.errorf("unexpected %s, want ',' or '}'", p.peekDesc())
	}
}

func (p *jparser) array(depth int) (*jval, error) {
	p.pos++ // [
	v := &jval{kind: jArray}
	p.skipSpace()
	if p.pos < len(p.s) && p.s[p.pos] == ']' {
		p.pos++
		return v, nil
	}
	for {
		p.skipSpace()
		el, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		v.arr = append(v.arr, el)
		p.skipSpace()
		if p.pos < len(p.s) && p.s[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.pos < len(p.s) && p.s[p.pos] == ']' {
			p.pos++
			return v, nil
		}
		return nil, p.errorf("unexpected %s, want ',' or ']'", p.peekDesc())
	}
}

// number accepts exactly the JSON number grammar.
func (p *jparser) number() (*jval, error) {
	start := p.pos
	digits := func() int {
		n := 0
		for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.s[p.pos] == '-' {
		p.pos++
	}
	if p.pos < len(p.s) && p.s[p.pos] == '0' {
		p.pos++
	} else if digits() == 0 {
		return nil, p.errorf("unexpected %s in a number", p.peekDesc())
	}
	if p.pos < len(p.s) && p.s[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return nil, p.errorf("unexpected %s, want a digit after '.'", p.peekDesc())
		}
	}
	if p.pos < len(p.s) && (p.s[p.pos] == 'e' || p.s[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.s) && (p.s[p.pos] == '+' || p.s[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return nil, p.errorf("unexpected %s, want a digit in the exponent", p.peekDesc())
		}
	}
	return &jval{kind: jNumber, str: p.s[start:p.pos]}, nil
}

// string decodes a JSON string; p.s[p.pos] is the opening quote.
func (p *jparser) string() (string, error) {
	p.pos++
	start := p.pos
	// Fast path: no escapes.
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		if c == '"' {
			s := p.s[start:p.pos]
			p.pos++
			return s, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.errorf("control character %q in a string", rune(c))
		}
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(p.s[p.pos:])
			if r == utf8.RuneError && n == 1 {
				return "", p.errorf("invalid UTF-8 in a string")
			}
			p.pos += n
			continue
		}
		p.pos++
	}
	var b strings.Builder
	b.WriteString(p.s[start:p.pos])
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		switch {
		case c == '"':
			p.pos++
			return b.String(), nil
		case c < 0x20:
			return "", p.errorf("control character %q in a string", rune(c))
		case c == '\\':
			if p.pos+1 >= len(p.s) {
				return "", p.errorf("unterminated string")
			}
			e := p.s[p.pos+1]
			p.pos += 2
			switch e {
			case '"', '\\', '/':
				b.WriteByte(e)
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
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", p.errorf(`want four hex digits after \u`)
				}
				if utf16.IsSurrogate(r) && strings.HasPrefix(p.s[p.pos:], `\u`) {
					save := p.pos
					p.pos += 2
					if r2, ok := p.hex4(); ok && utf16.DecodeRune(r, r2) != utf8.RuneError {
						r = utf16.DecodeRune(r, r2)
					} else {
						p.pos = save
					}
				}
				b.WriteRune(r) // a lone surrogate becomes U+FFFD
			default:
				p.pos--
				return "", p.errorf("invalid escape %q in a string", `\`+string(rune(e)))
			}
		default:
			r, n := utf8.DecodeRuneInString(p.s[p.pos:])
			if r == utf8.RuneError && n == 1 {
				return "", p.errorf("invalid UTF-8 in a string")
			}
			b.WriteString(p.s[p.pos : p.pos+n])
			p.pos += n
		}
	}
	return "", p.errorf("unterminated string")
}

func (p *jparser) hex4() (rune, bool) {
	if p.pos+4 > len(p.s) {
		return 0, false
	}
	n, err := strconv.ParseUint(p.s[p.pos:p.pos+4], 16, 32)
	if err != nil {
		return 0, false
	}
	p.pos += 4
	return rune(n), true
}

// appendJSON writes v as compact JSON, members in their order. Its recursion
// is bounded by the depth the parser already enforced.
func appendJSON(b []byte, v *jval) []byte {
	switch v.kind {
	case jNull:
		return append(b, "null"...)
	case jBool:
		return strconv.AppendBool(b, v.b)
	case jNumber:
		return append(b, v.str...)
	case jString:
		return appendJSONString(b, v.str)
	case jArray:
		b = append(b, '[')
		for i, el := range v.arr {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSON(b, el)
		}
		return append(b, ']')
	default:
		b = append(b, '{')
		for i, m := range v.obj {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, m.key)
			b = append(b, ':')
			b = appendJSON(b, m.val)
		}
		return append(b, '}')
	}
}

// appendJSONString quotes s as JSON does, escaping only what JSON requires
// (no HTML escaping: the text goes to an engine, not a browser).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

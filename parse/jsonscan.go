package parse

// jsonScanner checks, one byte at a time, that a text is a prefix of a
// JSON value (RFC 8259). The tool parsers stream a call's arguments as the
// model writes them: a byte the scanner accepts is part of some well-formed
// value, so it can be released at once, and the byte it refuses is where a
// malformed call is found, without waiting for the end of the answer.
//
// It keeps no text, only a stack of open containers (one byte each), and
// it never recurses: a hostile answer nesting deeper than maxJSONDepth is
// refused instead of growing the stack without bound.
type jsonScanner struct {
	// stack holds '{' or '[' for each open container.
	stack []byte
	state scanState
	// key: the string being scanned is an object's key.
	key bool
	// hex is how many hex digits of a \u escape are still expected.
	hex int
	// lit is the rest of the literal (true, false, null) being scanned.
	lit string
}

// maxJSONDepth bounds the nesting a scanned value may have.
const maxJSONDepth = 512

type scanState uint8

const (
	scanValue         scanState = iota // a value is expected (whitespace first)
	scanArrValueOrEnd                  // just after '[': a value or ']'
	scanKeyOrEnd                       // just after '{': a key or '}'
	scanKey                            // after ',' in an object: a key
	scanColon                          // after a key
	scanAfter                          // after a value in a container: ',' or its close
	scanString                         // inside a string
	scanEscape                         // after '\' in a string
	scanHex                            // inside \uXXXX
	scanMinus                          // after a number's '-'
	scanZero                           // a number's leading 0
	scanInt                            // a number's integer digits
	scanDot                            // after a number's '.'
	scanFrac                           // a number's fraction digits
	scanE                              // after 'e' or 'E'
	scanESign                          // after the exponent's sign
	scanExp                            // the exponent's digits
	scanLiteral                        // inside true, false or null
	scanDone                           // the value is complete
	scanError                          // the text is not JSON
)

// reset makes s ready for a new value.
func (s *jsonScanner) reset() {
	s.stack = s.stack[:0]
	s.state, s.key, s.hex, s.lit = scanValue, false, 0, ""
}

// done reports whether a complete value has been scanned.
func (s *jsonScanner) done() bool { return s.state == scanDone }

// depth is the number of open containers.
func (s *jsonScanner) depth() int { return len(s.stack) }

// expectsValue reports whether the next non-whitespace byte starts a value.
func (s *jsonScanner) expectsValue() bool {
	return s.state == scanValue || s.state == scanArrValueOrEnd
}

// inKey reports whether the scanner is inside an object's key.
func (s *jsonScanner) inKey() bool {
	return s.key && (s.state == scanString || s.state == scanEscape || s.state == scanHex)
}

// step scans c and reports whether the text so far is still a prefix of
// a JSON value. After a complete top-level value every byte is refused
// (a top-level number is complete only once a byte that cannot continue
// it arrives: step refuses that byte and done reports true).
func (s *jsonScanner) step(c byte) bool {
	switch s.state {
	case scanValue, scanArrValueOrEnd:
		if isJSONSpace(c) {
			return true
		}
		if c == ']' && s.state == scanArrValueOrEnd {
			return s.pop()
		}
		return s.begin(c)
	case scanKeyOrEnd, scanKey:
		switch {
		case isJSONSpace(c):
			return true
		case c == '"':
			s.state, s.key = scanString, true
			return true
		case c == '}' && s.state == scanKeyOrEnd:
			return s.pop()
		}
	case scanColon:
		switch {
		case isJSONSpace(c):
			return true
		case c == ':':
			s.state = scanValue
			return true
		}
	case scanAfter:
		top := s.stack[len(s.stack)-1]
		switch {
		case isJSONSpace(c):
			return true
		case c == ',' && top == '{':
			s.state = scanKey
			return true
		case c == ',':
			s.state = scanValue
			return true
		case c == '}' && top == '{', c == ']' && top == '[':
			return s.pop()
		}
	case scanString:
		switch {
		case c == '"':
			if s.key {
				s.state, s.key = scanColon, false
			} else {
				s.valueEnded()
			}
			return true
		case c == '\\':
			s.state = scanEscape
			return true
		case c >= 0x20:
			return true
		}
	case scanEscape:
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.state = scanString
			return true
		case 'u':
			s.state, s.hex = scanHex, 4
			return true
		}
	case scanHex:
		if isHexDigit(c) {
			if s.hex--; s.hex == 0 {
				s.state = scanString
			}
			return true
		}
	case scanMinus:
		if c == '0' {
			s.state = scanZero
			return true
		}
		if isDigit(c) {
			s.state = scanInt
			return true
		}
	case scanZero, scanInt, scanFrac, scanExp:
		switch {
		case isDigit(c) && s.state != scanZero:
			return true
		case c == '.' && (s.state == scanZero || s.state == scanInt):
			s.state = scanDot
			return true
		case (c == 'e' || c == 'E') && s.state != scanExp:
			s.state = scanE
			return true
		}
		// The number ended before c: c is what follows it.
		s.valueEnded()
		if s.state == scanDone {
			return false
		}
		return s.step(c)
	case scanDot:
		if isDigit(c) {
			s.state = scanFrac
			return true
		}
	case scanE:
		if c == '+' || c == '-' {
			s.state = scanESign
			return true
		}
		if isDigit(c) {
			s.state = scanExp
			return true
		}
	case scanESign:
		if isDigit(c) {
			s.state = scanExp
			return true
		}
	case scanLiteral:
		if c == s.lit[0] {
			if s.lit = s.lit[1:]; s.lit == "" {
				s.valueEnded()
			}
			return true
		}
	case scanDone, scanError:
		return false
	}
	s.state = scanError
	return false
}

// begin starts the value whose first byte is c.
func (s *jsonScanner) begin(c byte) bool {
	switch {
	case c == '{' || c == '[':
		if len(s.stack) >= maxJSONDepth {
			s.state = scanError
			return false
		}
		s.stack = append(s.stack, c)
		if c == '{' {
			s.state = scanKeyOrEnd
		} else {
			s.state = scanArrValueOrEnd
		}
	case c == '"':
		s.state, s.key = scanString, false
	case c == '-':
		s.state = scanMinus
	case c == '0':
		s.state = scanZero
	case isDigit(c):
		s.state = scanInt
	case c == 't':
		s.state, s.lit = scanLiteral, "rue"
	case c == 'f':
		s.state, s.lit = scanLiteral, "alse"
	case c == 'n':
		s.state, s.lit = scanLiteral, "ull"
	default:
		s.state = scanError
		return false
	}
	return true
}

// pop closes the innermost container.
func (s *jsonScanner) pop() bool {
	s.stack = s.stack[:len(s.stack)-1]
	s.valueEnded()
	return true
}

// valueEnded moves past a complete value.
func (s *jsonScanner) valueEnded() {
	if len(s.stack) == 0 {
		s.state = scanDone
	} else {
		s.state = scanAfter
	}
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
func isDigit(c byte) bool     { return '0' <= c && c <= '9' }
func isHexDigit(c byte) bool {
	return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

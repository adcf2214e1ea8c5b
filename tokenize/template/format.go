package template

import (
	"errors"
	"fmt"
	"strings"
)

// percentFormat is Python's printf-style "fmt % args" for the common
// conversions (s, r, d, i, f, x, o, e, g, %).
func percentFormat(format string, arg any) (any, error) {
	var args []any
	var mapping *OrderedMap
	// Python does not complain about unused arguments when the right side
	// supports item access (dict, list, Undefined, ...), only for tuples and
	// scalars.
	lenient := false
	switch x := arg.(type) {
	case Tuple:
		args = x
	case *OrderedMap:
		mapping = x
		args = []any{x}
		lenient = true
	case []any, Undefined, pyRange, *dictView:
		args = []any{arg}
		lenient = true
	default:
		args = []any{arg}
	}
	var b strings.Builder
	next := 0
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return nil, errors.New("ValueError: incomplete format")
		}
		var val any
		haveVal := false
		if format[i] == '(' && mapping != nil {
			end := strings.IndexByte(format[i:], ')')
			if end < 0 {
				return nil, errors.New("ValueError: incomplete format key")
			}
			v, ok := mapping.getAny(format[i+1 : i+end])
			if !ok {
				return nil, fmt.Errorf("KeyError: %s", reprString(format[i+1:i+end]))
			}
			val, haveVal = v, true
			i += end + 1
		}
		spec := ""
		for i < len(format) && strings.IndexByte("#0- +.0123456789", format[i]) >= 0 {
			spec += string(format[i])
			i++
		}
		if i >= len(format) {
			return nil, errors.New("ValueError: incomplete format")
		}
		conv := format[i]
		if conv == '%' {
			b.WriteByte('%')
			continue
		}
		if !haveVal {
			if next >= len(args) {
				return nil, errors.New("TypeError: not enough arguments for format string")
			}
			val = args[next]
			next++
		}
		switch conv {
		case 's':
			b.WriteString(fmt.Sprintf("%"+spec+"s", toStr(val)))
		case 'r', 'a':
			b.WriteString(fmt.Sprintf("%"+spec+"s", reprString(val)))
		case 'd', 'i', 'x', 'X', 'o':
			n, f, isF, ok := number(val)
			if !ok {
				return nil, fmt.Errorf("TypeError: %%%c format: a real number is required, not %s", conv, typeName(val))
			}
			if isF {
				n = int64(f)
			}
			verb := string(conv)
			if conv == 'i' {
				verb = "d"
			}
			b.WriteString(fmt.Sprintf("%"+spec+verb, n))
		case 'f', 'F', 'e', 'E', 'g', 'G':
			f, ok := toFloat(val)
			if !ok {
				return nil, fmt.Errorf("TypeError: must be real number, not %s", typeName(val))
			}
			if !strings.Contains(spec, ".") && conv != 'g' && conv != 'G' {
				spec += ".6"
			}
			b.WriteString(fmt.Sprintf("%"+spec+string(conv), f))
		default:
			return nil, fmt.Errorf("ValueError: unsupported format character '%c'", conv)
		}
	}
	if !lenient && next < len(args) {
		return nil, errors.New("TypeError: not all arguments converted during string formatting")
	}
	return b.String(), nil
}

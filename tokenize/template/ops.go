package template

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strings"
)

// Arithmetic and comparison with Python's rules: bool is an int, int and
// float mix, str and list concatenate and repeat, / is true division,
// // and % floor toward negative infinity.

// number returns v as an int64 or float64 if it is numeric.
func number(v any) (i int64, f float64, isFloat, ok bool) {
	switch x := v.(type) {
	case int64:
		return x, 0, false, true
	case bool:
		if x {
			return 1, 0, false, true
		}
		return 0, 0, false, true
	case float64:
		return 0, x, true, true
	}
	return 0, 0, false, false
}

func toFloat(v any) (float64, bool) {
	i, f, isF, ok := number(v)
	if !ok {
		return 0, false
	}
	if isF {
		return f, true
	}
	return float64(i), true
}

func unsupported(op string, a, b any) error {
	return fmt.Errorf("TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(a), typeName(b))
}

func binaryOp(op string, a, b any) (any, error) {
	if op == "~" {
		x, y := toStr(a), toStr(b)
		if err := textFits(int64(len(x)) + int64(len(y))); err != nil {
			return nil, err
		}
		return x + y, nil
	}
	if s, ok := a.(string); ok && op == "%" {
		return percentFormat(s, b) // str % anything, even Undefined
	}
	if u, ok := a.(Undefined); ok {
		return nil, u.err()
	}
	if u, ok := b.(Undefined); ok {
		return nil, u.err()
	}
	ai, af, aF, aNum := number(a)
	bi, bf, bF, bNum := number(b)
	if aNum && bNum {
		if !aF && !bF {
			return intOp(op, ai, bi)
		}
		if !aF {
			af = float64(ai)
		}
		if !bF {
			bf = float64(bi)
		}
		return floatOp(op, af, bf)
	}
	switch op {
	case "+":
		switch x := a.(type) {
		case string:
			if y, ok := b.(string); ok {
				if err := textFits(int64(len(x)) + int64(len(y))); err != nil {
					return nil, err
				}
				return x + y, nil
			}
			return nil, fmt.Errorf("TypeError: can only concatenate str (not \"%s\") to str", typeName(b))
		case []any:
			if y, ok := b.([]any); ok {
				if err := itemsFit(int64(len(x)) + int64(len(y))); err != nil {
					return nil, err
				}
				out := make([]any, 0, len(x)+len(y))
				return append(append(out, x...), y...), nil
			}
			return nil, fmt.Errorf("TypeError: can only concatenate list (not \"%s\") to list", typeName(b))
		case Tuple:
			if y, ok := b.(Tuple); ok {
				if err := itemsFit(int64(len(x)) + int64(len(y))); err != nil {
					return nil, err
				}
				out := make(Tuple, 0, len(x)+len(y))
				return append(append(out, x...), y...), nil
			}
		}
	case "*":
		var seq any
		var n int64
		switch {
		case aNum && !aF:
			seq, n = b, ai
		case bNum && !bF:
			seq, n = a, bi
		default:
			return nil, unsupported(op, a, b)
		}
		n = max(n, 0)
		switch x := seq.(type) {
		case string:
			if err := repeatFits(len(x), n, maxText, "a string"); err != nil {
				return nil, err
			}
			return strings.Repeat(x, int(n)), nil
		case []any:
			if err := repeatFits(len(x), n, maxItems, "a list"); err != nil {
				return nil, err
			}
			out := make([]any, 0, len(x)*int(n))
			for range n {
				out = append(out, x...)
			}
			return out, nil
		case Tuple:
			if err := repeatFits(len(x), n, maxItems, "a tuple"); err != nil {
				return nil, err
			}
			out := make(Tuple, 0, len(x)*int(n))
			for range n {
				out = append(out, x...)
			}
			return out, nil
		}
	case "%":
		if s, ok := a.(string); ok {
			return percentFormat(s, b)
		}
	}
	return nil, unsupported(op, a, b)
}

// errIntOverflow reports an int result beyond 64 bits, where Python would
// switch to arbitrary precision; we fail rather than wrap around.
var errIntOverflow = errors.New("OverflowError: integer result does not fit in 64 bits (unsupported)")

func floorDivInt(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func intOp(op string, a, b int64) (any, error) {
	switch op {
	case "+":
		s := a + b
		if (s > a) != (b > 0) {
			return nil, errIntOverflow
		}
		return s, nil
	case "-":
		d := a - b
		if (d < a) != (b > 0) {
			return nil, errIntOverflow
		}
		return d, nil
	case "*":
		if a != 0 && b != 0 {
			p := a * b
			if p/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
				return nil, errIntOverflow
			}
			return p, nil
		}
		return int64(0), nil
	case "/":
		if b == 0 {
			return nil, errors.New("ZeroDivisionError: division by zero")
		}
		return float64(a) / float64(b), nil
	case "//":
		if b == 0 {
			return nil, errors.New("ZeroDivisionError: integer division or modulo by zero")
		}
		return floorDivInt(a, b), nil
	case "%":
		if b == 0 {
			return nil, errors.New("ZeroDivisionError: integer modulo by zero")
		}
		return a - floorDivInt(a, b)*b, nil
	case "**":
		if b < 0 {
			return floatOp("**", float64(a), float64(b))
		}
		return intPow(a, b)
	}
	return nil, fmt.Errorf("unknown operator %s", op)
}

// intPow is a**b for b >= 0 by squaring, failing on overflow.
func intPow(a, b int64) (any, error) {
	result, base := any(int64(1)), any(a)
	for b > 0 {
		var err error
		if b&1 == 1 {
			if result, err = intOp("*", result.(int64), base.(int64)); err != nil {
				return nil, err
			}
		}
		b >>= 1
		if b > 0 {
			if base, err = intOp("*", base.(int64), base.(int64)); err != nil {
				return nil, err
			}
		}
	}
	return result, nil
}

// floatPow is Python's float ** float. Integral exponents are computed
// with extra precision and rounded once, as the C library's pow does;
// Go's math.Pow multiplies in float64 and can be off in the last digit.
func floatPow(a, b float64) (any, error) {
	if a == 0 && b < 0 {
		return nil, errors.New("ZeroDivisionError: 0.0 cannot be raised to a negative power")
	}
	if a < 0 && b != math.Trunc(b) {
		return nil, errors.New("ValueError: complex results are not supported")
	}
	if b == math.Trunc(b) && math.Abs(b) <= 4096 && a != 0 && !math.IsInf(a, 0) && !math.IsNaN(a) {
		n := int64(math.Abs(b))
		acc := new(big.Float).SetPrec(256).SetFloat64(1)
		base := new(big.Float).SetPrec(256).SetFloat64(a)
		for n > 0 {
			if n&1 == 1 {
				acc.Mul(acc, base)
			}
			n >>= 1
			if n > 0 {
				base.Mul(base, base)
			}
		}
		if b < 0 {
			acc.Quo(new(big.Float).SetPrec(256).SetFloat64(1), acc)
		}
		f, _ := acc.Float64()
		if math.IsInf(f, 0) {
			return nil, errors.New("OverflowError: (34, 'Numerical result out of range')")
		}
		return f, nil
	}
	return math.Pow(a, b), nil
}

// pyFloorDiv is CPython's float floor division (float_floor_div), which
// works from fmod rather than floor(a/b): 1 // 0.1 is 9.0, not 10.0.
func pyFloorDiv(a, b float64) float64 {
	mod := math.Mod(a, b)
	div := (a - mod) / b
	if mod != 0 && (b < 0) != (mod < 0) {
		div -= 1.0
	}
	if div == 0 {
		return math.Copysign(0, a/b)
	}
	fd := math.Floor(div)
	if div-fd > 0.5 {
		fd += 1.0
	}
	return fd
}

func floatOp(op string, a, b float64) (any, error) {
	switch op {
	case "+":
		return a + b, nil
	case "-":
		return a - b, nil
	case "*":
		return a * b, nil
	case "/":
		if b == 0 {
			return nil, errors.New("ZeroDivisionError: float division by zero")
		}
		return a / b, nil
	case "//":
		if b == 0 {
			return nil, errors.New("ZeroDivisionError: float floor division by zero")
		}
		return pyFloorDiv(a, b), nil
	case "%":
		if b == 0 {
			return nil, errors.New("ZeroDivisionError: float modulo")
		}
		m := math.Mod(a, b)
		if m == 0 {
			return math.Copysign(0, b), nil
		}
		if (m < 0) != (b < 0) {
			m += b
		}
		return m, nil
	case "**":
		return floatPow(a, b)
	}
	return nil, fmt.Errorf("unknown operator %s", op)
}

func unaryOp(op string, a any) (any, error) {
	if u, ok := a.(Undefined); ok {
		return nil, u.err()
	}
	i, f, isF, ok := number(a)
	if !ok {
		return nil, fmt.Errorf("TypeError: bad operand type for unary %s: '%s'", op, typeName(a))
	}
	if op == "+" {
		if isF {
			return f, nil
		}
		return i, nil
	}
	if isF {
		return -f, nil
	}
	return -i, nil
}

// compare evaluates one link of a comparison chain.
func compare(op string, a, b any) (bool, error) {
	switch op {
	case "==":
		return equal(a, b), nil
	case "!=":
		return !equal(a, b), nil
	case "<":
		return lessThan(a, b)
	case ">":
		return lessThan(b, a)
	case "<=":
		lt, err := lessThan(b, a)
		return !lt && err == nil, err
	case ">=":
		lt, err := lessThan(a, b)
		return !lt && err == nil, err
	case "in":
		return contains(b, a)
	case "notin":
		ok, err := contains(b, a)
		return !ok, err
	}
	return false, fmt.Errorf("unknown comparison %s", op)
}

// equal is Python's ==. Containers nested deeper than maxValueDepth compare
// unequal (where Python would raise RecursionError): equal has no error path
// and must not recurse without bound.
func equal(a, b any) bool { return equalDepth(a, b, 0) }

func equalDepth(a, b any, depth int) bool {
	if depth > maxValueDepth {
		return false
	}
	ai, af, aF, aNum := number(a)
	bi, bf, bF, bNum := number(b)
	if aNum && bNum {
		switch {
		case !aF && !bF:
			return ai == bi
		case aF && bF:
			return af == bf
		case aF:
			return af == float64(bi)
		default:
			return float64(ai) == bf
		}
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		return ok && equalSeq(x, y, depth)
	case Tuple:
		y, ok := b.(Tuple)
		return ok && equalSeq(x, y, depth)
	case *OrderedMap:
		y, ok := b.(*OrderedMap)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for i, k := range x.keys {
			v, ok := y.getAny(k)
			if !ok || !equalDepth(x.vals[i], v, depth+1) {
				return false
			}
		}
		return true
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	case pyRange:
		y, ok := b.(pyRange)
		return ok && equalSeq(x.items(), y.items(), depth)
	}
	return a == b
}

func equalSeq(x, y []any, depth int) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if !equalDepth(x[i], y[i], depth+1) {
			return false
		}
	}
	return true
}

// lessThan is Python's <.
func lessThan(a, b any) (bool, error) { return lessDepth(a, b, 0) }

func lessDepth(a, b any, depth int) (bool, error) {
	if depth > maxValueDepth {
		return false, errTooDeep("comparison")
	}
	if u, ok := a.(Undefined); ok {
		return false, u.err()
	}
	if u, ok := b.(Undefined); ok {
		return false, u.err()
	}
	ai, af, aF, aNum := number(a)
	bi, bf, bF, bNum := number(b)
	if aNum && bNum {
		switch {
		case !aF && !bF:
			return ai < bi, nil
		case aF && bF:
			return af < bf, nil
		case aF:
			return af < float64(bi), nil
		default:
			return float64(ai) < bf, nil
		}
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return x < y, nil
		}
	case []any:
		if y, ok := b.([]any); ok {
			return lessSeq(x, y, depth)
		}
	case Tuple:
		if y, ok := b.(Tuple); ok {
			return lessSeq(x, y, depth)
		}
	}
	return false, fmt.Errorf("TypeError: '<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func lessSeq(x, y []any, depth int) (bool, error) {
	for i := 0; i < len(x) && i < len(y); i++ {
		if !equalDepth(x[i], y[i], depth+1) {
			return lessDepth(x[i], y[i], depth+1)
		}
	}
	return len(x) < len(y), nil
}

// contains is Python's "item in container".
func contains(container, item any) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			return false, fmt.Errorf("TypeError: 'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(c, s), nil
	case []any:
		for _, e := range c {
			if equal(e, item) {
				return true, nil
			}
		}
		return false, nil
	case Tuple:
		for _, e := range c {
			if equal(e, item) {
				return true, nil
			}
		}
		return false, nil
	case *OrderedMap:
		if err := checkHashable(item); err != nil {
			return false, err
		}
		_, ok := c.getAny(item)
		return ok, nil
	case pyRange:
		return contains(c.items(), item)
	case *dictView:
		return contains(c.items, item)
	case Undefined:
		return false, nil
	case *generator:
		for _, e := range c.take() {
			if equal(e, item) {
				return true, nil
			}
		}
		return false, nil
	}
	return false, fmt.Errorf("TypeError: argument of type '%s' is not iterable", typeName(container))
}

// stableSort sorts idx with less, keeping equal elements in order (Python's
// sort is stable).
func stableSort[T any](items []T, less func(a, b T) bool) {
	sort.SliceStable(items, func(i, j int) bool { return less(items[i], items[j]) })
}

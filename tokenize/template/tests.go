package template

import (
	"fmt"
)

// testFunc implements one test: value is name(args).
type testFunc func(r *renderer, v any, a *callArgs) (any, error)

// tests are Jinja 3.1's built-in tests. Read-only after init.
var tests map[string]testFunc

func init() {
	eq := cmpTest("==")
	ne := cmpTest("!=")
	lt := cmpTest("<")
	le := cmpTest("<=")
	gt := cmpTest(">")
	ge := cmpTest(">=")
	tests = map[string]testFunc{
		"defined":   is(func(v any) bool { _, u := v.(Undefined); return !u }),
		"undefined": is(func(v any) bool { _, u := v.(Undefined); return u }),
		"none":      is(func(v any) bool { return v == nil }),
		"boolean":   is(func(v any) bool { _, ok := v.(bool); return ok }),
		"true":      is(func(v any) bool { b, ok := v.(bool); return ok && b }),
		"false":     is(func(v any) bool { b, ok := v.(bool); return ok && !b }),
		"integer":   is(func(v any) bool { _, ok := v.(int64); return ok }),
		"float":     is(func(v any) bool { _, ok := v.(float64); return ok }),
		"number":    is(func(v any) bool { _, _, _, ok := number(v); return ok }),
		"string":    is(func(v any) bool { _, ok := v.(string); return ok }),
		"mapping":   is(func(v any) bool { _, ok := v.(*OrderedMap); return ok }),
		"iterable": is(func(v any) bool {
			switch v.(type) {
			case string, []any, Tuple, *OrderedMap, Undefined, *generator, pyRange, *dictView:
				return true
			}
			return false
		}),
		"sequence": is(func(v any) bool {
			switch v.(type) {
			case string, []any, Tuple, *OrderedMap, Undefined, pyRange:
				return true
			}
			return false
		}),
		"callable": is(func(v any) bool {
			switch v.(type) {
			case *macro, *builtinFunc, *boundMethod, *loopContext, Undefined, *cycler:
				return true
			}
			return false
		}),
		"escaped": is(func(v any) bool { return false }),
		"lower":   is(func(v any) bool { return strPredicate(toStr(v), "islower") }),
		"upper":   is(func(v any) bool { return strPredicate(toStr(v), "isupper") }),
		"odd":     modTest(1),
		"even":    modTest(0),
		"divisibleby": func(r *renderer, v any, a *callArgs) (any, error) {
			p, err := a.bind("divisibleby", []string{"num"}, nil)
			if err != nil {
				return nil, err
			}
			m, err := binaryOp("%", v, p[0])
			if err != nil {
				return nil, err
			}
			return equal(m, int64(0)), nil
		},
		"sameas": func(r *renderer, v any, a *callArgs) (any, error) {
			p, err := a.bind("sameas", []string{"other"}, nil)
			if err != nil {
				return nil, err
			}
			return sameAs(v, p[0]), nil
		},
		"in": func(r *renderer, v any, a *callArgs) (any, error) {
			p, err := a.bind("in", []string{"seq"}, nil)
			if err != nil {
				return nil, err
			}
			return contains(p[0], v)
		},
		"filter": func(r *renderer, v any, a *callArgs) (any, error) {
			s, ok := v.(string)
			_, found := filters[s]
			return ok && found, nil
		},
		"test": func(r *renderer, v any, a *callArgs) (any, error) {
			s, ok := v.(string)
			_, found := tests[s]
			return ok && found, nil
		},
		"==": eq, "eq": eq, "equalto": eq,
		"!=": ne, "ne": ne,
		"<": lt, "lt": lt, "lessthan": lt,
		"<=": le, "le": le,
		">": gt, "gt": gt, "greaterthan": gt,
		">=": ge, "ge": ge,
	}
}

// is wraps a one-argument predicate as a test.
func is(pred func(any) bool) testFunc {
	return func(r *renderer, v any, a *callArgs) (any, error) {
		if len(a.pos) > 0 || len(a.kw) > 0 {
			return nil, fmt.Errorf("TypeError: test takes 1 positional argument but %d were given", 1+len(a.pos)+len(a.kw))
		}
		return pred(v), nil
	}
}

// modTest is Jinja's odd (value % 2 == 1) and even (value % 2 == 0).
func modTest(want int64) testFunc {
	return func(r *renderer, v any, a *callArgs) (any, error) {
		if len(a.pos)+len(a.kw) > 0 {
			return nil, fmt.Errorf("TypeError: test takes 1 positional argument but %d were given", 1+len(a.pos)+len(a.kw))
		}
		m, err := binaryOp("%", v, int64(2))
		if err != nil {
			return nil, err
		}
		return equal(m, want), nil
	}
}

func cmpTest(op string) testFunc {
	return func(r *renderer, v any, a *callArgs) (any, error) {
		p, err := a.bind(op, []string{"other"}, nil)
		if err != nil {
			return nil, err
		}
		if len(a.pos)+len(a.kw) == 0 {
			return nil, fmt.Errorf("TypeError: test '%s' missing 1 required positional argument", op)
		}
		return compare(op, v, p[0])
	}
}

// sameAs approximates Python's "is": identity for containers, value
// equality of the same type for scalars (small ints and interned strings).
func sameAs(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool, int64, float64, string:
		return a == b
	case []any:
		y, ok := b.([]any)
		return ok && len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0])
	case *OrderedMap, *Namespace, *macro, *generator:
		return a == b
	}
	return false
}

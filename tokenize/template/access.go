package template

import (
	"errors"
	"fmt"
	"strings"
)

// getAttr is the sandboxed environment's getattr(obj, name): a Python
// attribute first (methods of dict, str, list), then obj[name].
func getAttr(obj any, name string) (any, error) {
	switch x := obj.(type) {
	case *OrderedMap:
		if isMethod(x, name) {
			return &boundMethod{recv: x, name: name}, nil
		}
		if v, ok := x.getAny(name); ok {
			return v, nil
		}
	case Undefined:
		return nil, x.err()
	case *Namespace:
		if v, ok := x.attrs.getAny(name); ok {
			return v, nil
		}
	case *loopContext:
		if v, ok := x.attr(name); ok {
			return v, nil
		}
	case *macro:
		switch name {
		case "name":
			return x.name, nil
		case "arguments":
			names := make(Tuple, len(x.params))
			for i, p := range x.params {
				names[i] = p.name
			}
			return names, nil
		case "catch_varargs":
			return x.varargs, nil
		case "catch_kwargs":
			return x.kwargs, nil
		}
	default:
		if isMethod(obj, name) {
			return &boundMethod{recv: obj, name: name}, nil
		}
	}
	return undefinedAttr(obj, name), nil
}

// getItem is the sandboxed environment's getitem(obj, key): obj[key] first,
// then, for string keys, a Python attribute.
func getItem(obj any, key any) (any, error) {
	switch x := obj.(type) {
	case *OrderedMap:
		if v, ok := x.getAny(key); ok {
			return v, nil
		}
	case []any:
		if v, ok := indexSeq(x, key); ok {
			return v, nil
		}
	case Tuple:
		if v, ok := indexSeq(x, key); ok {
			return v, nil
		}
	case string:
		if i, ok := asIndex(key); ok {
			n := runeLen(x)
			if i < 0 {
				i += n
			}
			if i >= 0 && i < n {
				return runeAt(x, i), nil
			}
		}
	case pyRange:
		if i, ok := asIndex(key); ok {
			n := int(x.len())
			if i < 0 {
				i += n
			}
			if i >= 0 && i < n {
				return x.start + int64(i)*x.step, nil
			}
		}
	case Undefined:
		return nil, x.err()
	}
	if name, ok := key.(string); ok {
		switch x := obj.(type) {
		case *Namespace:
			if v, ok := x.attrs.getAny(name); ok {
				return v, nil
			}
		case *loopContext:
			if v, ok := x.attr(name); ok {
				return v, nil
			}
		default:
			if isMethod(obj, name) {
				return &boundMethod{recv: obj, name: name}, nil
			}
		}
	}
	return undefinedAttr(obj, key), nil
}

func asIndex(key any) (int, bool) {
	switch k := key.(type) {
	case int64:
		return int(k), true
	case bool:
		if k {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func indexSeq(items []any, key any) (any, bool) {
	i, ok := asIndex(key)
	if !ok {
		return nil, false
	}
	if i < 0 {
		i += len(items)
	}
	if i < 0 || i >= len(items) {
		return nil, false
	}
	return items[i], true
}

func runeLen(s string) int {
	n := 0
	for range s {
		n++
	}
	return n
}

func runeAt(s string, i int) string {
	for j, r := range s {
		if i == 0 {
			return s[j : j+len(string(r))]
		}
		i--
	}
	return ""
}

func evalSlice(r *renderer, sc *scope, obj any, s *sliceExpr) (any, error) {
	var bounds [3]any
	for i, x := range []expr{s.start, s.stop, s.step} {
		if x == nil {
			continue
		}
		v, err := x.eval(r, sc)
		if err != nil {
			return nil, err
		}
		bounds[i] = v
	}
	return sliceValue(obj, bounds[0], bounds[1], bounds[2])
}

// sliceValue is obj[start:stop:step] with Python's rules.
func sliceValue(obj, start, stop, step any) (any, error) {
	var n int
	var runes []rune
	switch x := obj.(type) {
	case []any:
		n = len(x)
	case Tuple:
		n = len(x)
	case string:
		runes = []rune(x)
		n = len(runes)
	case pyRange:
		lo, hi, st, err := adjustSlice(int(x.len()), start, stop, step)
		if err != nil {
			return nil, err
		}
		return pyRange{start: x.start + int64(lo)*x.step, stop: x.start + int64(hi)*x.step, step: x.step * int64(st)}, nil
	case Undefined:
		return nil, x.err()
	default:
		return nil, fmt.Errorf("TypeError: '%s' object is not subscriptable", typeName(obj))
	}
	idx, err := sliceIndices(n, start, stop, step)
	if err != nil {
		return nil, err
	}
	switch x := obj.(type) {
	case []any:
		out := make([]any, len(idx))
		for i, j := range idx {
			out[i] = x[j]
		}
		return out, nil
	case Tuple:
		out := make(Tuple, len(idx))
		for i, j := range idx {
			out[i] = x[j]
		}
		return out, nil
	}
	var b strings.Builder
	for _, j := range idx {
		b.WriteRune(runes[j])
	}
	return b.String(), nil
}

func sliceBound(v any) (int, bool, error) {
	switch x := v.(type) {
	case nil:
		return 0, false, nil
	case int64:
		return int(x), true, nil
	case bool:
		if x {
			return 1, true, nil
		}
		return 0, true, nil
	}
	return 0, false, errors.New("TypeError: slice indices must be integers or None")
}

// sliceIndices lists the positions selected by [start:stop:step] in a
// sequence of length n.
func sliceIndices(n int, start, stop, step any) ([]int, error) {
	lo, hi, st, err := adjustSlice(n, start, stop, step)
	if err != nil {
		return nil, err
	}
	var out []int
	for i := lo; (st > 0 && i < hi) || (st < 0 && i > hi); i += st {
		out = append(out, i)
	}
	return out, nil
}

// adjustSlice is PySlice_AdjustIndices: the effective start, stop and step
// of [start:stop:step] over a sequence of length n.
func adjustSlice(n int, start, stop, step any) (lo, hi, st int, err error) {
	st, hasStep, err := sliceBound(step)
	if err != nil {
		return 0, 0, 0, err
	}
	if !hasStep {
		st = 1
	}
	if st == 0 {
		return 0, 0, 0, errors.New("ValueError: slice step cannot be zero")
	}
	lo, hasLo, err := sliceBound(start)
	if err != nil {
		return 0, 0, 0, err
	}
	hi, hasHi, err := sliceBound(stop)
	if err != nil {
		return 0, 0, 0, err
	}
	adjust := func(i int, has bool, def int) int {
		if !has {
			return def
		}
		if i < 0 {
			i += n
			if i < 0 {
				if st < 0 {
					return -1
				}
				return 0
			}
		} else if i >= n {
			if st < 0 {
				return n - 1
			}
			return n
		}
		return i
	}
	if st > 0 {
		return adjust(lo, hasLo, 0), adjust(hi, hasHi, n), st, nil
	}
	return adjust(lo, hasLo, n-1), adjust(hi, hasHi, -1), st, nil
}

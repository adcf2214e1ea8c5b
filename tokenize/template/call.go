package template

import (
	"errors"
	"fmt"
)

// callArgs are evaluated call arguments.
type callArgs struct {
	pos []any
	kw  []kwArg
}

type kwArg struct {
	name string
	v    any
}

var noArgs = &callArgs{}

func evalArgs(r *renderer, sc *scope, a *args) (*callArgs, error) {
	if len(a.pos) == 0 && len(a.kw) == 0 && a.dynArgs == nil && a.dynKwargs == nil {
		return noArgs, nil
	}
	out := &callArgs{pos: make([]any, 0, len(a.pos))}
	for _, x := range a.pos {
		v, err := x.eval(r, sc)
		if err != nil {
			return nil, err
		}
		out.pos = append(out.pos, v)
	}
	for _, k := range a.kw {
		v, err := k.x.eval(r, sc)
		if err != nil {
			return nil, err
		}
		out.kw = append(out.kw, kwArg{name: k.name, v: v})
	}
	if a.dynArgs != nil {
		v, err := a.dynArgs.eval(r, sc)
		if err != nil {
			return nil, err
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		out.pos = append(out.pos, items...)
	}
	if a.dynKwargs != nil {
		v, err := a.dynKwargs.eval(r, sc)
		if err != nil {
			return nil, err
		}
		m, ok := v.(*OrderedMap)
		if !ok {
			return nil, fmt.Errorf("TypeError: argument after ** must be a mapping, not %s", typeName(v))
		}
		for i, k := range m.keys {
			ks, ok := k.(string)
			if !ok {
				return nil, errors.New("TypeError: keywords must be strings")
			}
			out.kw = append(out.kw, kwArg{name: ks, v: m.vals[i]})
		}
	}
	return out, nil
}

// bind matches arguments to named parameters with defaults, the way a
// Python function signature does. defaults[i] is used when parameter i is
// not given; a nil entry in required marks it mandatory.
func (a *callArgs) bind(fname string, names []string, defaults []any) ([]any, error) {
	if len(a.pos) > len(names) {
		return nil, fmt.Errorf("TypeError: %s() takes at most %d arguments (%d given)", fname, len(names), len(a.pos))
	}
	out := make([]any, len(names))
	set := make([]bool, len(names))
	for i, v := range a.pos {
		out[i] = v
		set[i] = true
	}
	for _, k := range a.kw {
		found := false
		for i, n := range names {
			if n == k.name {
				if set[i] {
					return nil, fmt.Errorf("TypeError: %s() got multiple values for argument '%s'", fname, k.name)
				}
				out[i], set[i], found = k.v, true, true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("TypeError: %s() got an unexpected keyword argument '%s'", fname, k.name)
		}
	}
	for i := range names {
		if !set[i] {
			if i < len(defaults) {
				out[i] = defaults[i]
			}
		}
	}
	return out, nil
}

// builtinFunc is a global function such as range or namespace.
type builtinFunc struct {
	name string
	fn   func(r *renderer, a *callArgs) (any, error)
}

// macro is a {% macro %} (or the caller of a {% call %} block).
type macro struct {
	name    string
	node    *macroNode
	params  []param
	body    []node
	sc      *scope
	varargs bool
	kwargs  bool
}

func (m *macro) call(r *renderer, a *callArgs) (any, error) {
	if r.depth >= maxDepth {
		return nil, errors.New("RecursionError: maximum recursion depth exceeded in macro calls")
	}
	if err := r.step(); err != nil {
		return nil, err
	}
	msc := &scope{parent: m.sc, names: make([]string, 0, len(m.params)+2), vals: make([]any, 0, len(m.params)+2)}
	given := make([]bool, len(m.params))
	var extra []any
	for i, v := range a.pos {
		if i < len(m.params) {
			msc.set(m.params[i].name, v)
			given[i] = true
		} else {
			extra = append(extra, v)
		}
	}
	if len(extra) > 0 && !m.varargs {
		return nil, fmt.Errorf("TypeError: macro '%s' takes not more than %d argument(s)", m.name, len(m.params))
	}
	kwargs := NewOrderedMap()
	var caller any
	for _, k := range a.kw {
		matched := false
		for i, p := range m.params {
			if p.name == k.name {
				if given[i] {
					return nil, fmt.Errorf("TypeError: macro '%s' got multiple values for argument '%s'", m.name, k.name)
				}
				msc.set(p.name, k.v)
				given[i], matched = true, true
				break
			}
		}
		if matched {
			continue
		}
		if k.name == "caller" {
			caller = k.v
			continue
		}
		if !m.kwargs {
			return nil, fmt.Errorf("TypeError: macro '%s' takes no keyword argument '%s'", m.name, k.name)
		}
		kwargs.setAny(k.name, k.v)
	}
	r.depth++
	defer func() { r.depth-- }()
	for i, p := range m.params {
		if given[i] {
			continue
		}
		if p.def == nil {
			msc.set(p.name, Undefined{hint: fmt.Sprintf("parameter '%s' was not provided", p.name)})
			continue
		}
		v, err := p.def.eval(r, msc)
		if err != nil {
			return nil, err
		}
		msc.set(p.name, v)
	}
	msc.set("varargs", Tuple(extra))
	msc.set("kwargs", kwargs)
	if caller != nil {
		msc.set("caller", caller)
	}
	return r.capture(m.body, msc)
}

// callValue calls fn (a macro, global, bound method or recursive loop).
func callValue(r *renderer, fn any, a *callArgs) (any, error) {
	switch f := fn.(type) {
	case *macro:
		return f.call(r, a)
	case *builtinFunc:
		return f.fn(r, a)
	case *boundMethod:
		return callMethod(r, f, a)
	case *loopContext:
		return f.call(r, a)
	case Undefined:
		return nil, f.err()
	}
	return nil, fmt.Errorf("TypeError: '%s' object is not callable", typeName(fn))
}

package template

import (
	"errors"
	"fmt"
)

func (e *constExpr) eval(r *renderer, sc *scope) (any, error) { return e.val, nil }

func (e *nameExpr) eval(r *renderer, sc *scope) (any, error) {
	if v, ok := sc.lookup(e.name); ok {
		return v, nil
	}
	return undefinedName(e.name), nil
}

func (e *attrExpr) eval(r *renderer, sc *scope) (any, error) {
	obj, err := e.obj.eval(r, sc)
	if err != nil {
		return nil, err
	}
	return getAttr(obj, e.attr)
}

func (e *itemExpr) eval(r *renderer, sc *scope) (any, error) {
	obj, err := e.obj.eval(r, sc)
	if err != nil {
		return nil, err
	}
	if s, ok := e.key.(*sliceExpr); ok {
		return evalSlice(r, sc, obj, s)
	}
	key, err := e.key.eval(r, sc)
	if err != nil {
		return nil, err
	}
	return getItem(obj, key)
}

func (e *sliceExpr) eval(r *renderer, sc *scope) (any, error) {
	return nil, errors.New("TypeError: slice outside a subscript")
}

func (e *listExpr) eval(r *renderer, sc *scope) (any, error) {
	out := make([]any, len(e.items))
	for i, x := range e.items {
		v, err := x.eval(r, sc)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (e *tupleExpr) eval(r *renderer, sc *scope) (any, error) {
	out := make(Tuple, len(e.items))
	for i, x := range e.items {
		v, err := x.eval(r, sc)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (e *dictExpr) eval(r *renderer, sc *scope) (any, error) {
	m := newOrderedMapCap(len(e.keys))
	for i := range e.keys {
		k, err := e.keys[i].eval(r, sc)
		if err != nil {
			return nil, err
		}
		if err := checkHashable(k); err != nil {
			return nil, err
		}
		v, err := e.vals[i].eval(r, sc)
		if err != nil {
			return nil, err
		}
		m.setAny(k, v)
	}
	return m, nil
}

func checkHashable(k any) error {
	switch k.(type) {
	case []any, *OrderedMap, *generator:
		return fmt.Errorf("TypeError: unhashable type: '%s'", typeName(k))
	}
	return nil
}

func (e *binExpr) eval(r *renderer, sc *scope) (any, error) {
	a, err := e.left.eval(r, sc)
	if err != nil {
		return nil, err
	}
	b, err := e.right.eval(r, sc)
	if err != nil {
		return nil, err
	}
	return binaryOp(e.op, a, b)
}

func (e *andExpr) eval(r *renderer, sc *scope) (any, error) {
	a, err := e.left.eval(r, sc)
	if err != nil || !truthy(a) {
		return a, err
	}
	return e.right.eval(r, sc)
}

func (e *orExpr) eval(r *renderer, sc *scope) (any, error) {
	a, err := e.left.eval(r, sc)
	if err != nil || truthy(a) {
		return a, err
	}
	return e.right.eval(r, sc)
}

func (e *notExpr) eval(r *renderer, sc *scope) (any, error) {
	a, err := e.x.eval(r, sc)
	if err != nil {
		return nil, err
	}
	return !truthy(a), nil
}

func (e *negExpr) eval(r *renderer, sc *scope) (any, error) {
	a, err := e.x.eval(r, sc)
	if err != nil {
		return nil, err
	}
	return unaryOp("-", a)
}

func (e *posExpr) eval(r *renderer, sc *scope) (any, error) {
	a, err := e.x.eval(r, sc)
	if err != nil {
		return nil, err
	}
	return unaryOp("+", a)
}

func (e *condExpr) eval(r *renderer, sc *scope) (any, error) {
	t, err := e.test.eval(r, sc)
	if err != nil {
		return nil, err
	}
	if truthy(t) {
		return e.yes.eval(r, sc)
	}
	if e.no == nil {
		return Undefined{hint: "the inline if-expression evaluated to false and no else section was defined."}, nil
	}
	return e.no.eval(r, sc)
}

func (e *cmpExpr) eval(r *renderer, sc *scope) (any, error) {
	a, err := e.first.eval(r, sc)
	if err != nil {
		return nil, err
	}
	for _, o := range e.ops {
		b, err := o.x.eval(r, sc)
		if err != nil {
			return nil, err
		}
		ok, err := compare(o.op, a, b)
		if err != nil || !ok {
			return false, err
		}
		a = b
	}
	return true, nil
}

func (e *callExpr) eval(r *renderer, sc *scope) (any, error) {
	fn, err := e.fn.eval(r, sc)
	if err != nil {
		return nil, err
	}
	a, err := evalArgs(r, sc, &e.args)
	if err != nil {
		return nil, err
	}
	return callValue(r, fn, a)
}

func (e *filterExpr) eval(r *renderer, sc *scope) (any, error) {
	var v any
	if e.x != nil {
		var err error
		if v, err = e.x.eval(r, sc); err != nil {
			return nil, err
		}
	}
	return callFilter(r, sc, e, v)
}

func (e *testExpr) eval(r *renderer, sc *scope) (any, error) {
	v, err := e.x.eval(r, sc)
	if err != nil {
		return nil, err
	}
	t, ok := tests[e.name]
	if !ok {
		return nil, fmt.Errorf("TemplateRuntimeError: No test named '%s'.", e.name)
	}
	a, err := evalArgs(r, sc, &e.args)
	if err != nil {
		return nil, err
	}
	return t(r, v, a)
}

func callFilter(r *renderer, sc *scope, e *filterExpr, v any) (any, error) {
	f, ok := filters[e.name]
	if !ok {
		return nil, fmt.Errorf("TemplateRuntimeError: No filter named '%s'.", e.name)
	}
	a, err := evalArgs(r, sc, &e.args)
	if err != nil {
		return nil, err
	}
	return f(r, v, a)
}

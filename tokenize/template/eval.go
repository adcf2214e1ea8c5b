package template

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// maxDepth bounds macro and recursive-loop nesting so a template cannot
// exhaust the Go stack.
const maxDepth = 500

var (
	errBreak    = errors.New("template: break outside a loop")
	errContinue = errors.New("template: continue outside a loop")
)

// renderer holds the state of one Render call.
type renderer struct {
	out   *strings.Builder
	now   func() time.Time
	depth int
	steps int // loop iterations and macro calls so far (see step)
}

// scope is one level of variables. Jinja gives each loop iteration, macro
// call and with block a fresh scope whose parent is the enclosing one;
// assignments go to the innermost scope, so a {% set %} inside a loop is
// gone after it (namespace() exists for that reason). Lookups walk outward
// and see the parent's current values (macros close over their defining
// scope late, as Python closures do).
type scope struct {
	parent *scope
	names  []string
	vals   []any
	vars   map[string]any // the Render variables, on the root scope only
}

func newScope(parent *scope) *scope { return &scope{parent: parent} }

func (s *scope) lookup(name string) (any, bool) {
	for sc := s; sc != nil; sc = sc.parent {
		for i := len(sc.names) - 1; i >= 0; i-- {
			if sc.names[i] == name {
				return sc.vals[i], true
			}
		}
		if sc.vars != nil {
			if v, ok := sc.vars[name]; ok {
				return v, true
			}
		}
	}
	if g, ok := globals[name]; ok {
		return g, true
	}
	return nil, false
}

func (s *scope) set(name string, v any) {
	for i, n := range s.names {
		if n == name {
			s.vals[i] = v
			return
		}
	}
	s.names = append(s.names, name)
	s.vals = append(s.vals, v)
}

func (r *renderer) execBody(body []node, sc *scope) error {
	for _, n := range body {
		if err := n.exec(r, sc); err != nil {
			return err
		}
	}
	return nil
}

// capture renders body into a string instead of the output.
func (r *renderer) capture(body []node, sc *scope) (string, error) {
	saved := r.out
	var b strings.Builder
	r.out = &b
	err := r.execBody(body, sc)
	r.out = saved
	return b.String(), err
}

func (n *textNode) exec(r *renderer, sc *scope) error {
	return r.write(n.text)
}

func (n *outputNode) exec(r *renderer, sc *scope) error {
	v, err := n.x.eval(r, sc)
	if err != nil {
		return err
	}
	switch x := v.(type) {
	case string:
		return r.write(x)
	case Undefined:
		return nil
	default:
		return r.write(toStr(v))
	}
}

func (n *ifNode) exec(r *renderer, sc *scope) error {
	for i, c := range n.conds {
		v, err := c.eval(r, sc)
		if err != nil {
			return err
		}
		if truthy(v) {
			return r.execBody(n.bodies[i], sc)
		}
	}
	return r.execBody(n.orElse, sc)
}

func (n breakNode) exec(r *renderer, sc *scope) error    { return errBreak }
func (n continueNode) exec(r *renderer, sc *scope) error { return errContinue }

func (n *generationNode) exec(r *renderer, sc *scope) error { return r.execBody(n.body, sc) }

func (n *forNode) exec(r *renderer, sc *scope) error {
	it, err := n.iter.eval(r, sc)
	if err != nil {
		return err
	}
	return n.run(r, sc, it, 0)
}

// run executes the loop over it; depth counts recursive loop() calls.
func (n *forNode) run(r *renderer, sc *scope, it any, depth int) error {
	items, err := iterate(it)
	if err != nil {
		return err
	}
	if n.cond != nil {
		kept := make([]any, 0, len(items))
		for _, item := range items {
			if err := r.step(); err != nil {
				return err
			}
			isc := newScope(sc)
			if err := assign(isc, n.target, item); err != nil {
				return err
			}
			ok, err := n.cond.eval(r, isc)
			if err != nil {
				return err
			}
			if truthy(ok) {
				kept = append(kept, item)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return r.execBody(n.orElse, sc)
	}
	loop := &loopContext{items: items, node: n, sc: sc, depth: depth}
	// As in Jinja, the else block also runs when no iteration reached the
	// end of the body (every one ended in break or continue).
	completed := false
	for i, item := range items {
		if err := r.step(); err != nil {
			return err
		}
		loop.index = i
		isc := &scope{parent: sc, names: make([]string, 0, 4), vals: make([]any, 0, 4)}
		if err := assign(isc, n.target, item); err != nil {
			return err
		}
		isc.set("loop", loop)
		err := r.execBody(n.body, isc)
		if err == errBreak {
			break
		}
		if err == nil {
			completed = true
		} else if err != errContinue {
			return err
		}
	}
	if !completed {
		return r.execBody(n.orElse, sc)
	}
	return nil
}

func (n *setNode) exec(r *renderer, sc *scope) error {
	v, err := n.x.eval(r, sc)
	if err != nil {
		return err
	}
	return assign(sc, n.target, v)
}

func (n *setBlockNode) exec(r *renderer, sc *scope) error {
	s, err := r.capture(n.body, sc)
	if err != nil {
		return err
	}
	var v any = s
	if n.filter != nil {
		if v, err = applyFilterChain(r, sc, n.filter, s); err != nil {
			return err
		}
	}
	return assign(sc, n.target, v)
}

func (n *filterBlockNode) exec(r *renderer, sc *scope) error {
	s, err := r.capture(n.body, sc)
	if err != nil {
		return err
	}
	v, err := applyFilterChain(r, sc, n.filter, s)
	if err != nil {
		return err
	}
	return r.write(toStr(v))
}

// applyFilterChain applies a filter chain whose innermost operand is nil
// (the rendered body of a block) to body.
func applyFilterChain(r *renderer, sc *scope, f *filterExpr, body any) (any, error) {
	v := body
	if inner, ok := f.x.(*filterExpr); ok && inner != nil {
		var err error
		if v, err = applyFilterChain(r, sc, inner, body); err != nil {
			return nil, err
		}
	}
	return callFilter(r, sc, f, v)
}

func (n *withNode) exec(r *renderer, sc *scope) error {
	inner := newScope(sc)
	for i, t := range n.targets {
		v, err := n.vals[i].eval(r, sc)
		if err != nil {
			return err
		}
		if err := assign(inner, t, v); err != nil {
			return err
		}
	}
	return r.execBody(n.body, inner)
}

func (n *macroNode) exec(r *renderer, sc *scope) error {
	sc.set(n.name, &macro{name: n.name, node: n, params: n.params, body: n.body, sc: sc,
		varargs: n.usesVarg, kwargs: n.usesKwa})
	return nil
}

func (n *callBlockNode) exec(r *renderer, sc *scope) error {
	caller := &macro{name: "caller", params: n.params, body: n.body, sc: sc, varargs: true, kwargs: true}
	fn, err := n.call.fn.eval(r, sc)
	if err != nil {
		return err
	}
	a, err := evalArgs(r, sc, &n.call.args)
	if err != nil {
		return err
	}
	// a may be the shared empty argument list: build a new one.
	a = &callArgs{pos: a.pos, kw: append(append([]kwArg(nil), a.kw...), kwArg{name: "caller", v: caller})}
	v, err := callValue(r, fn, a)
	if err != nil {
		return err
	}
	return r.write(toStr(v))
}

// assign binds v to t in sc.
func assign(sc *scope, t target, v any) error {
	switch {
	case t.ns != "":
		nsv, ok := sc.lookup(t.ns)
		ns, isNS := nsv.(*Namespace)
		if !ok || !isNS {
			return errors.New("TemplateRuntimeError: cannot assign attribute on non-namespace object")
		}
		ns.attrs.setAny(t.attr, v)
		return nil
	case t.items != nil:
		items, err := iterate(v)
		if err != nil {
			return err
		}
		if len(items) != len(t.items) {
			if len(items) > len(t.items) {
				return fmt.Errorf("ValueError: too many values to unpack (expected %d)", len(t.items))
			}
			return fmt.Errorf("ValueError: not enough values to unpack (expected %d, got %d)", len(t.items), len(items))
		}
		for i, sub := range t.items {
			if err := assign(sc, sub, items[i]); err != nil {
				return err
			}
		}
		return nil
	}
	sc.set(t.name, v)
	return nil
}

// iterate is Python's list(iter(v)) for the values templates loop over.
func iterate(v any) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case Tuple:
		return x, nil
	case *OrderedMap:
		return append([]any(nil), x.keys...), nil
	case string:
		out := make([]any, 0, len(x))
		for _, r := range x {
			out = append(out, string(r))
		}
		return out, nil
	case Undefined:
		return nil, nil
	case *generator:
		return x.take(), nil
	case pyRange:
		return x.items(), nil
	case *dictView:
		return x.items, nil
	case *Namespace, nil, bool, int64, float64:
		return nil, fmt.Errorf("TypeError: '%s' object is not iterable", typeName(v))
	}
	return nil, fmt.Errorf("TypeError: '%s' object is not iterable", typeName(v))
}

// iterItems is iterate for callers that already know v is a sequence.
func iterItems(v any) ([]any, error) { return iterate(v) }

// loopContext is Jinja's loop variable.
type loopContext struct {
	items []any
	index int
	node  *forNode
	sc    *scope
	depth int
	// changed() remembers its last arguments.
	lastChanged any
	hasChanged  bool
}

func (l *loopContext) attr(name string) (any, bool) {
	n := int64(len(l.items))
	i := int64(l.index)
	switch name {
	case "index":
		return i + 1, true
	case "index0":
		return i, true
	case "revindex":
		return n - i, true
	case "revindex0":
		return n - i - 1, true
	case "first":
		return i == 0, true
	case "last":
		return i == n-1, true
	case "length":
		return n, true
	case "depth":
		return int64(l.depth + 1), true
	case "depth0":
		return int64(l.depth), true
	case "previtem":
		if i == 0 {
			return Undefined{hint: "there is no previous item"}, true
		}
		return l.items[i-1], true
	case "nextitem":
		if i == n-1 {
			return Undefined{hint: "there is no next item"}, true
		}
		return l.items[i+1], true
	case "cycle", "changed":
		return &boundMethod{recv: l, name: name}, true
	}
	return nil, false
}

// call runs a recursive loop body over it (loop(children)).
func (l *loopContext) call(r *renderer, a *callArgs) (any, error) {
	if !l.node.recursive {
		return nil, errors.New("TypeError: Tried to call non recursive loop. Maybe you forgot the 'recursive' modifier.")
	}
	if len(a.pos) != 1 {
		return nil, errors.New("TypeError: loop() takes exactly one argument")
	}
	if l.depth+1 > maxDepth {
		return nil, errors.New("RecursionError: maximum recursion depth exceeded")
	}
	saved := r.out
	var b strings.Builder
	r.out = &b
	err := l.node.run(r, l.sc, a.pos[0], l.depth+1)
	r.out = saved
	return b.String(), err
}

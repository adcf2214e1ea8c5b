package template

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Template values are plain Go values with Python meanings:
//
//	nil          None
//	bool         bool
//	int64        int (arbitrary precision is not modelled)
//	float64      float
//	string       str
//	[]any        list
//	Tuple        tuple
//	*OrderedMap  dict (insertion ordered, as Python dicts are)
//	Undefined    jinja2.Undefined
//	*Namespace   jinja2 namespace()
//	*generator   the lazy result of select/map/... (truthy, consumed once)
//	callables    macros, globals, bound methods, loop objects
//
// Inputs handed to Render are normalised to these types first (int → int64,
// map[string]any → *OrderedMap with sorted keys, []string → []any, ...).

// Tuple is a Python tuple. It renders as (a, b) and is distinct from a list
// under equality, as in Python.
type Tuple []any

// OrderedMap is a dict that remembers insertion order, like a Python dict.
// Keys are usually strings (JSON objects); template literals may also use
// ints, floats, bools or None as keys. Setting an existing key keeps its
// position. The zero value is not usable; call NewOrderedMap.
type OrderedMap struct {
	keys  []any
	vals  []any
	index map[any]int
}

// NewOrderedMap returns an empty insertion-ordered map.
func NewOrderedMap() *OrderedMap {
	return &OrderedMap{index: make(map[any]int)}
}

func newOrderedMapCap(n int) *OrderedMap {
	return &OrderedMap{keys: make([]any, 0, n), vals: make([]any, 0, n), index: make(map[any]int, n)}
}

// Set stores v under the string key k.
func (m *OrderedMap) Set(k string, v any) { m.setAny(k, v) }

// Get returns the value stored under the string key k.
func (m *OrderedMap) Get(k string) (any, bool) { return m.getAny(k) }

// Keys returns the string keys in insertion order (non-string keys are
// formatted as Python's str() would).
func (m *OrderedMap) Keys() []string {
	out := make([]string, len(m.keys))
	for i, k := range m.keys {
		if s, ok := k.(string); ok {
			out[i] = s
		} else {
			out[i] = toStr(k)
		}
	}
	return out
}

// Len is the number of entries.
func (m *OrderedMap) Len() int { return len(m.keys) }

// hashKey maps Python-equal keys (1, 1.0, True) to one Go map key.
func hashKey(k any) any {
	switch v := k.(type) {
	case bool:
		if v {
			return int64(1)
		}
		return int64(0)
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<62 {
			return int64(v)
		}
		return v
	case Tuple:
		return "\x00tuple" + reprString(v)
	case []any, *OrderedMap:
		return "\x00unhashable" + reprString(v)
	}
	return k
}

func (m *OrderedMap) setAny(k, v any) {
	h := hashKey(k)
	if i, ok := m.index[h]; ok {
		m.vals[i] = v
		return
	}
	m.index[h] = len(m.keys)
	m.keys = append(m.keys, k)
	m.vals = append(m.vals, v)
}

func (m *OrderedMap) getAny(k any) (any, bool) {
	i, ok := m.index[hashKey(k)]
	if !ok {
		return nil, false
	}
	return m.vals[i], true
}

func (m *OrderedMap) copyMap() *OrderedMap {
	c := newOrderedMapCap(len(m.keys))
	for i, k := range m.keys {
		c.setAny(k, m.vals[i])
	}
	return c
}

// Undefined is jinja2.Undefined: printing it gives "", iterating it gives
// nothing, it is falsy, and most other uses fail with hint as the message.
type Undefined struct {
	hint string
}

func undefinedName(name string) Undefined {
	return Undefined{hint: fmt.Sprintf("'%s' is undefined", name)}
}

// undefinedAttr is the Undefined for a failed obj.name or obj[name], with
// Jinja's message.
func undefinedAttr(obj any, name any) Undefined {
	if _, ok := name.(string); !ok {
		return Undefined{hint: fmt.Sprintf("%s has no element %s", objectDesc(obj), reprString(name))}
	}
	return Undefined{hint: fmt.Sprintf("%s has no attribute %s", reprString(objectDesc(obj)), reprString(name))}
}

func (u Undefined) err() error {
	if u.hint == "" {
		return fmt.Errorf("UndefinedError: value is undefined")
	}
	return fmt.Errorf("UndefinedError: %s", u.hint)
}

// Namespace is the object made by namespace(); the only object whose
// attributes templates may assign ({% set ns.x = ... %}).
type Namespace struct {
	attrs *OrderedMap
}

// pyRange is the object range() returns: a lazy sequence of ints that
// prints as range(start, stop[, step]).
type pyRange struct {
	start, stop, step int64
}

func (r pyRange) len() int64 {
	switch {
	case r.step > 0 && r.stop > r.start:
		return (r.stop - r.start + r.step - 1) / r.step
	case r.step < 0 && r.stop < r.start:
		return (r.start - r.stop - r.step - 1) / -r.step
	}
	return 0
}

func (r pyRange) items() []any {
	out := make([]any, r.len())
	for i := range out {
		out[i] = r.start + int64(i)*r.step
	}
	return out
}

// dictView is what dict.items(), .keys() and .values() return; it prints
// as dict_items([...]) and otherwise behaves as a list.
type dictView struct {
	kind  string // "dict_items", "dict_keys", "dict_values"
	items []any
}

// generator is the lazy iterator that select, map, reject, ... return in
// Jinja. It is always truthy, has no len(), and can be iterated only once.
type generator struct {
	items    []any
	consumed bool
}

func (g *generator) take() []any {
	if g.consumed {
		return nil
	}
	g.consumed = true
	return g.items
}

// truthy is Python's bool().
func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case Tuple:
		return len(x) > 0
	case *OrderedMap:
		return x.Len() > 0
	case pyRange:
		return x.len() > 0
	case *dictView:
		return len(x.items) > 0
	case Undefined:
		return false
	}
	return true
}

// typeName is Python's type(v).__name__.
func typeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []any:
		return "list"
	case Tuple:
		return "tuple"
	case *OrderedMap:
		return "dict"
	case Undefined:
		return "Undefined"
	case *Namespace:
		return "Namespace"
	case *generator:
		return "generator"
	case pyRange:
		return "range"
	case *dictView:
		return x.kind
	case *macro:
		return "Macro"
	case *loopContext:
		return "LoopContext"
	}
	return "function"
}

// objectDesc mirrors jinja2.utils.object_type_repr.
func objectDesc(v any) string {
	switch v.(type) {
	case nil:
		return "None"
	}
	return typeName(v) + " object"
}

// toStr is Python's str().
func toStr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return floatRepr(x)
	case Undefined:
		return ""
	}
	return reprString(v)
}

// floatRepr is Python's repr(float): the shortest round-tripping digits,
// scientific notation below 1e-4 and from 1e16.
func floatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	if exp >= -4 && exp < 16 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.ContainsAny(s, ".") {
			s += ".0"
		}
		return s
	}
	sign := "+"
	if exp < 0 {
		sign = "-"
		exp = -exp
	}
	return fmt.Sprintf("%se%s%02d", mant, sign, exp)
}

// reprString is Python's repr().
func reprString(v any) string {
	var b strings.Builder
	writeRepr(&b, v)
	return b.String()
}

// maxValueDepth bounds every recursive walk over a value: repr, tojson,
// ==, <, and the conversion of Render's variables. Client JSON is already
// held to MaxJSONDepth by DecodeJSON, but values also arrive as Go values
// and templates can build nested lists themselves ({% set ns.x = [ns.x] %}
// in a loop), so each walk checks again. Python stops at about the same
// depth (its default recursion limit is 1000).
const maxValueDepth = 1000

// errTooDeep is the error of a walk that reached maxValueDepth.
func errTooDeep(what string) error {
	return fmt.Errorf("RecursionError: maximum recursion depth (%d) exceeded in %s", maxValueDepth, what)
}

func writeRepr(b *strings.Builder, v any) { writeReprDepth(b, v, 0) }

// writeReprDepth writes repr(v); containers deeper than maxValueDepth are
// elided as Python elides a self-referencing list: [...].
func writeReprDepth(b *strings.Builder, v any, depth int) {
	if depth > maxValueDepth {
		b.WriteString("...")
		return
	}
	switch x := v.(type) {
	case string:
		writeStrRepr(b, x)
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeReprDepth(b, e, depth+1)
		}
		b.WriteByte(']')
	case Tuple:
		b.WriteByte('(')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeReprDepth(b, e, depth+1)
		}
		if len(x) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(')')
	case *OrderedMap:
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeReprDepth(b, k, depth+1)
			b.WriteString(": ")
			writeReprDepth(b, x.vals[i], depth+1)
		}
		b.WriteByte('}')
	case Undefined:
		b.WriteString("Undefined")
	case *Namespace:
		b.WriteString("<Namespace ")
		writeReprDepth(b, x.attrs, depth+1)
		b.WriteByte('>')
	case *generator:
		b.WriteString("<generator object at 0x0>")
	case *dictView:
		b.WriteString(x.kind)
		b.WriteByte('(')
		writeReprDepth(b, x.items, depth+1)
		b.WriteByte(')')
	case pyRange:
		if x.step == 1 {
			fmt.Fprintf(b, "range(%d, %d)", x.start, x.stop)
		} else {
			fmt.Fprintf(b, "range(%d, %d, %d)", x.start, x.stop, x.step)
		}
	case *macro:
		fmt.Fprintf(b, "<Macro '%s'>", x.name)
	case *loopContext:
		fmt.Fprintf(b, "<LoopContext %d/%d>", x.index+1, len(x.items))
	case *boundMethod:
		fmt.Fprintf(b, "<built-in method %s of %s object at 0x0>", x.name, typeName(x.recv))
	case *builtinFunc:
		fmt.Fprintf(b, "<function %s at 0x0>", x.name)
	default:
		b.WriteString(toStr(v))
	}
}

// writeStrRepr writes Python's repr of a str.
func writeStrRepr(b *strings.Builder, s string) {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	b.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == rune(quote) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case !pyIsPrintable(r):
			switch {
			case r < 0x100:
				fmt.Fprintf(b, `\x%02x`, r)
			case r < 0x10000:
				fmt.Fprintf(b, `\u%04x`, r)
			default:
				fmt.Fprintf(b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(quote)
}

// sortedKeys returns the keys of a plain Go map in sorted order.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// normalizeVar converts one of Render's variables into a template value,
// refusing values nested deeper than maxValueDepth (or cyclic ones).
func normalizeVar(v any) (any, error) {
	if err := checkDepth(v); err != nil {
		return nil, err
	}
	return normalize(v), nil
}

// checkDepth walks v with an explicit stack (so that the check itself cannot
// overflow) and fails when containers nest deeper than maxValueDepth.
func checkDepth(v any) error {
	type item struct {
		v     any
		depth int
	}
	stack := []item{{v, 0}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		push := func(e any) { stack = append(stack, item{e, it.depth + 1}) }
		switch it.v.(type) {
		case []any, Tuple, []map[string]any, map[string]any, *OrderedMap:
			if it.depth >= maxValueDepth {
				return errTooDeep("the template's variables")
			}
		}
		switch x := it.v.(type) {
		case []any:
			for _, e := range x {
				push(e)
			}
		case Tuple:
			for _, e := range x {
				push(e)
			}
		case []map[string]any:
			for _, e := range x {
				push(e)
			}
		case map[string]any:
			for _, e := range x {
				push(e)
			}
		case *OrderedMap:
			for _, e := range x.vals {
				push(e)
			}
		}
	}
	return nil
}

// normalize converts caller-supplied Go values into template values. It
// returns v itself when nothing needs converting. Its input must have passed
// checkDepth.
func normalize(v any) any {
	switch x := v.(type) {
	case nil, bool, int64, float64, string, Undefined, *Namespace:
		return v
	case int:
		return int64(x)
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case uint:
		return int64(x)
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case uint64:
		return int64(x)
	case float32:
		return float64(x)
	case []any:
		var out []any
		for i, e := range x {
			n := normalize(e)
			if out == nil && !sameValue(n, e) {
				out = make([]any, len(x))
				copy(out, x[:i])
			}
			if out != nil {
				out[i] = n
			}
		}
		if out == nil {
			return x
		}
		return out
	case []string:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out
	case []map[string]any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	case map[string]any:
		m := newOrderedMapCap(len(x))
		for _, k := range sortedKeys(x) {
			m.setAny(k, normalize(x[k]))
		}
		return m
	case map[string]string:
		m := newOrderedMapCap(len(x))
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			m.setAny(k, x[k])
		}
		return m
	case *OrderedMap:
		var out *OrderedMap
		for i, e := range x.vals {
			n := normalize(e)
			if out == nil && !sameValue(n, e) {
				out = x.copyMap()
			}
			if out != nil {
				out.vals[i] = n
			}
		}
		if out == nil {
			return x
		}
		return out
	case Tuple:
		return Tuple(normalize([]any(x)).([]any))
	}
	return fmt.Sprint(v)
}

// sameValue reports whether normalize left a value untouched (identity for
// containers, equality for scalars).
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case []any:
		y, ok := b.([]any)
		return ok && len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0])
	case *OrderedMap:
		y, ok := b.(*OrderedMap)
		return ok && x == y
	case map[string]any, map[string]string, []string, []map[string]any, Tuple:
		return false
	}
	return a == b
}

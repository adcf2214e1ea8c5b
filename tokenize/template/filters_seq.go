package template

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Filters over sequences and mappings.

// attrGetter is Jinja's make_attrgetter: "a.b.0" looks up a, then b, then
// item 0, each with getitem semantics; def replaces undefined results.
func attrGetter(attribute any, def any) (func(any) (any, error), error) {
	var parts []any
	switch x := attribute.(type) {
	case string:
		for _, p := range strings.Split(x, ".") {
			if n, err := strconv.ParseInt(p, 10, 64); err == nil {
				parts = append(parts, n)
			} else {
				parts = append(parts, p)
			}
		}
	case int64:
		parts = []any{x}
	case nil:
		parts = []any{nil}
	default:
		parts = []any{x}
	}
	return func(item any) (any, error) {
		for _, p := range parts {
			var err error
			if item, err = getItem(item, p); err != nil {
				return nil, err
			}
			if _, undef := item.(Undefined); undef && def != nil {
				item = def
			}
		}
		return item, nil
	}, nil
}

// sortKey lower-cases strings for the case-insensitive sorts.
func sortKey(v any, caseSensitive bool) any {
	if s, ok := v.(string); ok && !caseSensitive {
		return pyLower(s)
	}
	return v
}

func sortValues(items []any, keys []any, reverse bool) error {
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var err error
	stableSort(idx, func(a, b int) bool {
		x, y := keys[a], keys[b]
		if reverse {
			x, y = y, x
		}
		lt, e := lessThan(x, y)
		if e != nil && err == nil {
			err = e
		}
		return lt
	})
	if err != nil {
		return err
	}
	sorted := make([]any, len(items))
	for i, j := range idx {
		sorted[i] = items[j]
	}
	copy(items, sorted)
	return nil
}

func filterSort(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("sort", []string{"reverse", "case_sensitive", "attribute"}, []any{false, false, nil})
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	items = append([]any{}, items...)
	keys := make([]any, len(items))
	get := func(x any) (any, error) { return x, nil }
	if p[2] != nil {
		if get, err = attrGetter(p[2], nil); err != nil {
			return nil, err
		}
	}
	for i, it := range items {
		k, err := get(it)
		if err != nil {
			return nil, err
		}
		keys[i] = sortKey(k, truthy(p[1]))
	}
	return items, sortValues(items, keys, truthy(p[0]))
}

func filterDictsort(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("dictsort", []string{"case_sensitive", "by", "reverse"}, []any{false, "key", false})
	if err != nil {
		return nil, err
	}
	m, ok := v.(*OrderedMap)
	if !ok {
		return nil, errors.New("FilterArgumentError: dictsort filter requires a mapping")
	}
	pos := 0
	switch toStr(p[1]) {
	case "key":
	case "value":
		pos = 1
	default:
		return nil, errors.New("FilterArgumentError: You can only sort by either 'key' or 'value'")
	}
	items := make([]any, m.Len())
	keys := make([]any, m.Len())
	for i, k := range m.keys {
		items[i] = Tuple{k, m.vals[i]}
		keys[i] = sortKey(items[i].(Tuple)[pos], truthy(p[0]))
	}
	return items, sortValues(items, keys, truthy(p[2]))
}

func filterItems(r *renderer, v any, a *callArgs) (any, error) {
	switch x := v.(type) {
	case Undefined:
		return &generator{}, nil
	case *OrderedMap:
		out := make([]any, len(x.keys))
		for i, k := range x.keys {
			out[i] = Tuple{k, x.vals[i]}
		}
		return &generator{items: out}, nil
	}
	return nil, errors.New("TypeError: Can only get item pairs from a mapping.")
}

func filterMap(r *renderer, v any, a *callArgs) (any, error) {
	if !truthy(v) {
		return &generator{}, nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	var fn func(any) (any, error)
	if len(a.pos) == 0 {
		var attr, def any
		hasAttr := false
		for _, k := range a.kw {
			switch k.name {
			case "attribute":
				attr, hasAttr = k.v, true
			case "default":
				def = k.v
			default:
				return nil, fmt.Errorf("FilterArgumentError: Unexpected keyword argument '%s'", k.name)
			}
		}
		if !hasAttr {
			return nil, errors.New("FilterArgumentError: map requires a filter argument")
		}
		if fn, err = attrGetter(attr, def); err != nil {
			return nil, err
		}
	} else {
		name, ok := a.pos[0].(string)
		f, found := filters[name]
		if !ok || !found {
			return nil, fmt.Errorf("TemplateRuntimeError: No filter named %s.", reprString(a.pos[0]))
		}
		rest := &callArgs{pos: a.pos[1:], kw: a.kw}
		fn = func(x any) (any, error) { return f(r, x, rest) }
	}
	out := make([]any, len(items))
	for i, it := range items {
		if out[i], err = fn(it); err != nil {
			return nil, err
		}
	}
	return &generator{items: out}, nil
}

// selectFilter builds select, reject, selectattr and rejectattr.
func selectFilter(keep, byAttr bool) filterFunc {
	return func(r *renderer, v any, a *callArgs) (any, error) {
		if !truthy(v) {
			return &generator{}, nil
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		args := a.pos
		get := func(x any) (any, error) { return x, nil }
		if byAttr {
			if len(args) == 0 {
				return nil, errors.New("FilterArgumentError: Missing parameter for attribute name")
			}
			if get, err = attrGetter(args[0], nil); err != nil {
				return nil, err
			}
			args = args[1:]
		}
		test := func(x any) (bool, error) { return truthy(x), nil }
		if len(args) > 0 {
			name, ok := args[0].(string)
			t, found := tests[name]
			if !ok || !found {
				return nil, fmt.Errorf("TemplateRuntimeError: No test named %s.", reprString(args[0]))
			}
			rest := &callArgs{pos: args[1:], kw: a.kw}
			test = func(x any) (bool, error) {
				res, err := t(r, x, rest)
				return truthy(res), err
			}
		}
		var out []any
		for _, it := range items {
			x, err := get(it)
			if err != nil {
				return nil, err
			}
			ok, err := test(x)
			if err != nil {
				return nil, err
			}
			if ok == keep {
				out = append(out, it)
			}
		}
		return &generator{items: out}, nil
	}
}

func filterUnique(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("unique", []string{"case_sensitive", "attribute"}, []any{false, nil})
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	get := func(x any) (any, error) { return x, nil }
	if p[1] != nil {
		if get, err = attrGetter(p[1], nil); err != nil {
			return nil, err
		}
	}
	seen := NewOrderedMap()
	var out []any
	for _, it := range items {
		k, err := get(it)
		if err != nil {
			return nil, err
		}
		k = sortKey(k, truthy(p[0]))
		if err := checkHashable(k); err != nil {
			return nil, err
		}
		if _, dup := seen.getAny(k); !dup {
			seen.setAny(k, true)
			out = append(out, it)
		}
	}
	return &generator{items: out}, nil
}

func minMax(v any, a *callArgs, wantMax bool) (any, error) {
	p, err := a.bind("min", []string{"case_sensitive", "attribute"}, []any{false, nil})
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{hint: "No aggregated item, sequence was empty."}, nil
	}
	get := func(x any) (any, error) { return x, nil }
	if p[1] != nil {
		if get, err = attrGetter(p[1], nil); err != nil {
			return nil, err
		}
	}
	best := items[0]
	bk, err := get(best)
	if err != nil {
		return nil, err
	}
	bk = sortKey(bk, truthy(p[0]))
	for _, it := range items[1:] {
		k, err := get(it)
		if err != nil {
			return nil, err
		}
		k = sortKey(k, truthy(p[0]))
		var better bool
		if wantMax {
			better, err = lessThan(bk, k)
		} else {
			better, err = lessThan(k, bk)
		}
		if err != nil {
			return nil, err
		}
		if better {
			best, bk = it, k
		}
	}
	return best, nil
}

func filterMax(r *renderer, v any, a *callArgs) (any, error) { return minMax(v, a, true) }
func filterMin(r *renderer, v any, a *callArgs) (any, error) { return minMax(v, a, false) }

func filterSum(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("sum", []string{"attribute", "start"}, []any{nil, int64(0)})
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	get := func(x any) (any, error) { return x, nil }
	if p[0] != nil {
		if get, err = attrGetter(p[0], nil); err != nil {
			return nil, err
		}
	}
	total := p[1]
	for _, it := range items {
		x, err := get(it)
		if err != nil {
			return nil, err
		}
		if total, err = binaryOp("+", total, x); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func filterReverse(r *renderer, v any, a *callArgs) (any, error) {
	if s, ok := v.(string); ok {
		runes := []rune(s)
		for i, j := 0, len(runes)-1; i < j; i, j = i+1, j-1 {
			runes[i], runes[j] = runes[j], runes[i]
		}
		return string(runes), nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, errors.New("FilterArgumentError: argument must be iterable")
	}
	out := make([]any, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	if _, isGen := v.(*generator); isGen {
		return out, nil
	}
	return &generator{items: out}, nil
}

func filterBatch(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("batch", []string{"linecount", "fill_with"}, []any{nil, nil})
	if err != nil {
		return nil, err
	}
	n, err := intArg(p[0], 0)
	if err != nil || n <= 0 {
		return nil, errors.New("FilterArgumentError: batch linecount must be a positive integer")
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	var out []any
	for i := 0; i < len(items); i += n {
		row := append([]any{}, items[i:min(i+n, len(items))]...)
		if len(row) < n && p[1] != nil {
			for len(row) < n {
				row = append(row, p[1])
			}
		}
		out = append(out, row)
	}
	return &generator{items: out}, nil
}

func filterSlice(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("slice", []string{"slices", "fill_with"}, []any{nil, nil})
	if err != nil {
		return nil, err
	}
	slices, err := intArg(p[0], 0)
	if err != nil || slices <= 0 {
		return nil, errors.New("FilterArgumentError: slices must be a positive integer")
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	per, extra := len(items)/slices, len(items)%slices
	offset := 0
	var out []any
	for i := range slices {
		start := offset + i*per
		if i < extra {
			offset++
		}
		end := offset + (i+1)*per
		row := append([]any{}, items[start:end]...)
		if p[1] != nil && i >= extra {
			row = append(row, p[1])
		}
		out = append(out, row)
	}
	return &generator{items: out}, nil
}

func filterGroupby(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("groupby", []string{"attribute", "default", "case_sensitive"}, []any{nil, nil, false})
	if err != nil {
		return nil, err
	}
	get, err := attrGetter(p[0], p[1])
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	items = append([]any{}, items...)
	keys := make([]any, len(items))
	for i, it := range items {
		k, err := get(it)
		if err != nil {
			return nil, err
		}
		keys[i] = sortKey(k, truthy(p[2]))
	}
	idx := make([]any, len(items))
	for i := range idx {
		idx[i] = int64(i)
	}
	if err := sortValues(idx, keys, false); err != nil {
		return nil, err
	}
	var out []any
	for _, ix := range idx {
		i := ix.(int64)
		k := keys[i]
		if n := len(out); n > 0 && equal(sortKey(out[n-1].(Tuple)[0], truthy(p[2])), k) {
			g := out[n-1].(Tuple)
			g[1] = append(g[1].([]any), items[i])
			continue
		}
		grouper, _ := get(items[i])
		out = append(out, Tuple{grouper, []any{items[i]}})
	}
	return out, nil
}

package template

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// filterFunc implements one filter: value|name(args).
type filterFunc func(r *renderer, v any, a *callArgs) (any, error)

// filters are Jinja 3.1's built-in filters, with tojson replaced by the
// transformers version. Read-only after init.
var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"abs":         filterAbs,
		"attr":        filterAttr,
		"batch":       filterBatch,
		"capitalize":  strFilter(pyCapitalize),
		"center":      filterCenter,
		"count":       filterLength,
		"d":           filterDefault,
		"default":     filterDefault,
		"dictsort":    filterDictsort,
		"e":           filterEscape,
		"escape":      filterEscape,
		"first":       filterFirst,
		"float":       filterFloat,
		"forceescape": filterEscape,
		"format":      filterFormat,
		"groupby":     filterGroupby,
		"indent":      filterIndent,
		"int":         filterInt,
		"items":       filterItems,
		"join":        filterJoin,
		"last":        filterLast,
		"length":      filterLength,
		"list":        filterList,
		"lower":       strFilter(pyLower),
		"map":         filterMap,
		"max":         filterMax,
		"min":         filterMin,
		"pprint":      func(r *renderer, v any, a *callArgs) (any, error) { return reprString(v), nil },
		"reject":      selectFilter(false, false),
		"rejectattr":  selectFilter(false, true),
		"replace":     filterReplace,
		"reverse":     filterReverse,
		"round":       filterRound,
		"safe":        func(r *renderer, v any, a *callArgs) (any, error) { return toStr(v), nil },
		"select":      selectFilter(true, false),
		"selectattr":  selectFilter(true, true),
		"slice":       filterSlice,
		"sort":        filterSort,
		"string":      func(r *renderer, v any, a *callArgs) (any, error) { return toStr(v), nil },
		"striptags":   filterStriptags,
		"sum":         filterSum,
		"title":       strFilter(jinjaTitle),
		"tojson":      filterToJSON,
		"trim":        filterTrim,
		"truncate":    filterTruncate,
		"unique":      filterUnique,
		"upper":       strFilter(pyUpper),
		"wordcount":   filterWordcount,
	}
}

func strFilter(f func(string) string) filterFunc {
	return func(r *renderer, v any, a *callArgs) (any, error) { return f(toStr(v)), nil }
}

var wordBeginningSplit = regexp.MustCompile(`[-\s({\[<]+`)

// jinjaTitle is Jinja's title filter (not str.title): each word that starts
// after "-", whitespace or an opening bracket gets its first character
// upper-cased and the rest lower-cased.
func jinjaTitle(s string) string {
	var b strings.Builder
	last := 0
	word := func(w string) {
		if w == "" {
			return
		}
		r, n := utf8.DecodeRuneInString(w)
		b.WriteString(pyUpper(string(r)))
		b.WriteString(pyLower(w[n:]))
	}
	for _, loc := range wordBeginningSplit.FindAllStringIndex(s, -1) {
		word(s[last:loc[0]])
		b.WriteString(pyUpper(s[loc[0]:loc[1]]))
		last = loc[1]
	}
	word(s[last:])
	return b.String()
}

func filterAbs(r *renderer, v any, a *callArgs) (any, error) {
	i, f, isF, ok := number(v)
	if !ok {
		return nil, fmt.Errorf("TypeError: bad operand type for abs(): '%s'", typeName(v))
	}
	if isF {
		return math.Abs(f), nil
	}
	if i < 0 {
		return -i, nil
	}
	return i, nil
}

func filterAttr(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("attr", []string{"name"}, nil)
	if err != nil {
		return nil, err
	}
	name, ok := p[0].(string)
	if !ok {
		return undefinedAttr(v, p[0]), nil
	}
	return getAttr(v, name)
}

func filterCenter(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("center", []string{"width"}, []any{int64(80)})
	if err != nil {
		return nil, err
	}
	return callStrMethod(toStr(v), "center", &callArgs{pos: p})
}

func filterLength(r *renderer, v any, a *callArgs) (any, error) {
	switch x := v.(type) {
	case string:
		return int64(utf8.RuneCountInString(x)), nil
	case []any:
		return int64(len(x)), nil
	case Tuple:
		return int64(len(x)), nil
	case *OrderedMap:
		return int64(x.Len()), nil
	case pyRange:
		return x.len(), nil
	case *dictView:
		return int64(len(x.items)), nil
	case Undefined:
		return int64(0), nil
	}
	return nil, fmt.Errorf("TypeError: object of type '%s' has no len()", typeName(v))
}

func filterDefault(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("default", []string{"default_value", "boolean"}, []any{"", false})
	if err != nil {
		return nil, err
	}
	if _, ok := v.(Undefined); ok || (truthy(p[1]) && !truthy(v)) {
		return p[0], nil
	}
	return v, nil
}

var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "'", "&#39;", `"`, "&#34;")

func filterEscape(r *renderer, v any, a *callArgs) (any, error) {
	return htmlEscaper.Replace(toStr(v)), nil
}

func filterFirst(r *renderer, v any, a *callArgs) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{hint: "No first item, sequence was empty."}, nil
	}
	return items[0], nil
}

func filterLast(r *renderer, v any, a *callArgs) (any, error) {
	if g, ok := v.(*generator); ok {
		return nil, fmt.Errorf("TypeError: '%s' object is not reversible", typeName(g))
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{hint: "No last item, sequence was empty."}, nil
	}
	return items[len(items)-1], nil
}

// pyParseFloat is Python's float(str): surrounding whitespace and
// underscores between digits allowed, plus inf/nan spellings.
func pyParseFloat(s string) (float64, bool) {
	s = strings.TrimFunc(s, pyIsSpace)
	switch strings.ToLower(strings.TrimLeft(s, "+-")) {
	case "inf", "infinity", "nan":
	default:
		if s == "" || strings.ContainsAny(s, "xXpP") || strings.HasPrefix(s, "_") || strings.HasSuffix(s, "_") || strings.Contains(s, "__") {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
			return f, true
		}
		return 0, false
	}
	return f, true
}

func filterFloat(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("float", []string{"default"}, []any{0.0})
	if err != nil {
		return nil, err
	}
	if u, ok := v.(Undefined); ok {
		return nil, u.err()
	}
	if f, ok := toFloat(v); ok {
		return f, nil
	}
	if s, ok := v.(string); ok {
		if f, ok := pyParseFloat(s); ok {
			return f, nil
		}
	}
	return p[0], nil
}

func filterInt(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("int", []string{"default", "base"}, []any{int64(0), int64(10)})
	if err != nil {
		return nil, err
	}
	if u, ok := v.(Undefined); ok {
		return nil, u.err()
	}
	i, f, isF, ok := number(v)
	if ok {
		if isF {
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return p[0], nil
			}
			return int64(f), nil
		}
		return i, nil
	}
	if s, ok := v.(string); ok {
		base, _ := intArg(p[1], 10)
		if n, ok := pyParseInt(s, base); ok {
			return n, nil
		}
		if fl, ok := pyParseFloat(s); ok && !math.IsNaN(fl) && !math.IsInf(fl, 0) {
			return int64(fl), nil
		}
	}
	return p[0], nil
}

// pyParseInt is Python's int(str, base) for bases 0 and 2-36.
func pyParseInt(s string, base int) (int64, bool) {
	t := strings.TrimFunc(s, pyIsSpace)
	sign := ""
	if t != "" && (t[0] == '-' || t[0] == '+') {
		sign, t = t[:1], t[1:]
	}
	if strings.HasPrefix(t, "_") || strings.HasSuffix(t, "_") || strings.Contains(t, "__") {
		return 0, false
	}
	lower := strings.ToLower(t)
	for _, p := range []struct {
		prefix string
		base   int
	}{{"0x", 16}, {"0o", 8}, {"0b", 2}} {
		if strings.HasPrefix(lower, p.prefix) && (base == p.base || base == 0) {
			t, base = strings.TrimPrefix(t[2:], "_"), p.base
		}
	}
	if base == 0 {
		if len(t) > 1 && strings.Trim(t, "0_") != "" && t[0] == '0' {
			return 0, false
		}
		base = 10
	}
	if base < 2 || base > 36 {
		return 0, false
	}
	n, err := strconv.ParseInt(sign+strings.ReplaceAll(t, "_", ""), base, 64)
	return n, err == nil
}

func filterFormat(r *renderer, v any, a *callArgs) (any, error) {
	if len(a.pos) > 0 && len(a.kw) > 0 {
		return nil, errors.New("FilterArgumentError: can't handle positional and keyword arguments at the same time")
	}
	if len(a.kw) > 0 {
		m := NewOrderedMap()
		kwargsMap(a, m)
		return percentFormat(toStr(v), m)
	}
	return percentFormat(toStr(v), Tuple(a.pos))
}

// filterIndent is Jinja 3's indent(width=4, first=False, blank=False).
func filterIndent(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("indent", []string{"width", "first", "blank"}, []any{int64(4), false, false})
	if err != nil {
		return nil, err
	}
	var ind string
	switch w := p[0].(type) {
	case string:
		ind = w
	default:
		n, err := intArg(w, 4)
		if err != nil {
			return nil, err
		}
		n = max(n, 0) // a negative width indents nothing, as " " * n does in Python
		if err := textFits(int64(n)); err != nil {
			return nil, err
		}
		ind = strings.Repeat(" ", n)
	}
	var s string
	switch x := v.(type) {
	case string:
		s = x + "\n"
	case Undefined:
		return nil, x.err()
	case []any, Tuple, *OrderedMap:
		return nil, fmt.Errorf("AttributeError: '%s' object has no attribute 'splitlines'", typeName(v))
	default:
		return nil, fmt.Errorf("TypeError: unsupported operand type(s) for +=: '%s' and 'str'", typeName(v))
	}
	lines := pySplitlines(s)
	if err := repeatFits(len(ind), int64(len(lines)), maxText-int64(len(s)), "an indented string"); err != nil {
		return nil, err
	}
	var out string
	if truthy(p[2]) {
		out = strings.Join(lines, "\n"+ind)
	} else {
		var b strings.Builder
		if len(lines) > 0 {
			b.WriteString(lines[0])
		}
		for i, l := range lines[min(1, len(lines)):] {
			if i == 0 {
				b.WriteString("\n")
			} else {
				b.WriteString("\n")
			}
			if l != "" {
				b.WriteString(ind)
			}
			b.WriteString(l)
		}
		out = b.String()
	}
	if truthy(p[1]) {
		out = ind + out
	}
	return out, nil
}

func filterJoin(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("join", []string{"d", "attribute"}, []any{"", nil})
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if p[1] != nil {
		get, err := attrGetter(p[1], nil)
		if err != nil {
			return nil, err
		}
		for i := range items {
			if items[i], err = get(items[i]); err != nil {
				return nil, err
			}
		}
	}
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = toStr(it)
	}
	return strings.Join(parts, toStr(p[0])), nil
}

func filterList(r *renderer, v any, a *callArgs) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	return append([]any{}, items...), nil
}

func filterReplace(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("replace", []string{"old", "new", "count"}, []any{nil, nil, nil})
	if err != nil {
		return nil, err
	}
	if len(a.pos)+len(a.kw) < 2 {
		return nil, errors.New("TypeError: do_replace() missing required arguments 'old' and 'new'")
	}
	n, err := intArg(p[2], -1)
	if err != nil {
		return nil, err
	}
	s, old, nw := toStr(v), toStr(p[0]), toStr(p[1])
	if err := replacedFits(s, old, nw, n); err != nil {
		return nil, err
	}
	return strings.Replace(s, old, nw, n), nil
}

func filterRound(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("round", []string{"precision", "method"}, []any{int64(0), "common"})
	if err != nil {
		return nil, err
	}
	prec, err := intArg(p[0], 0)
	if err != nil {
		return nil, err
	}
	method := toStr(p[1])
	i, f, isF, ok := number(v)
	if !ok {
		return nil, fmt.Errorf("TypeError: type %s doesn't define __round__ method", typeName(v))
	}
	switch method {
	case "common":
		if !isF {
			return i, nil
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return f, nil
		}
		if prec < 0 {
			scale := math.Pow(10, float64(-prec))
			return math.RoundToEven(f/scale) * scale, nil
		}
		out, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', prec, 64), 64)
		return out, nil
	case "ceil", "floor":
		if !isF {
			f = float64(i)
		}
		scale := math.Pow(10, float64(prec))
		if method == "ceil" {
			return math.Ceil(f*scale) / scale, nil
		}
		return math.Floor(f*scale) / scale, nil
	}
	return nil, errors.New("FilterArgumentError: method must be common, ceil or floor")
}

var tagRe = regexp.MustCompile(`(?s)<!--.*?-->|<[^>]*>`)

func filterStriptags(r *renderer, v any, a *callArgs) (any, error) {
	s := tagRe.ReplaceAllString(toStr(v), "")
	fields := strings.FieldsFunc(s, pyIsSpace)
	s = strings.Join(fields, " ")
	for _, e := range [][2]string{{"&lt;", "<"}, {"&gt;", ">"}, {"&#34;", `"`}, {"&#39;", "'"}, {"&quot;", `"`}, {"&amp;", "&"}} {
		s = strings.ReplaceAll(s, e[0], e[1])
	}
	return s, nil
}

func filterToJSON(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("tojson", []string{"ensure_ascii", "indent", "separators", "sort_keys"}, []any{false, nil, nil, false})
	if err != nil {
		return nil, err
	}
	o, err := newJSONOptions(p[1], p[2], truthy(p[0]), truthy(p[3]))
	if err != nil {
		return nil, err
	}
	return dumpJSON(v, o)
}

func filterTrim(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("trim", []string{"chars"}, []any{nil})
	if err != nil {
		return nil, err
	}
	chars, err := optStr(p[0], "strip")
	if err != nil {
		return nil, err
	}
	return pyStrip(toStr(v), chars, true, true), nil
}

func filterTruncate(r *renderer, v any, a *callArgs) (any, error) {
	p, err := a.bind("truncate", []string{"length", "killwords", "end", "leeway"}, []any{int64(255), false, "...", int64(5)})
	if err != nil {
		return nil, err
	}
	s := toStr(v)
	length, err := intArg(p[0], 255)
	if err != nil {
		return nil, err
	}
	end := toStr(p[2])
	leeway, err := intArg(p[3], 5)
	if err != nil {
		return nil, err
	}
	runes := []rune(s)
	if len(runes) <= length+leeway {
		return s, nil
	}
	cut := max(length-utf8.RuneCountInString(end), 0)
	if truthy(p[1]) {
		return string(runes[:cut]) + end, nil
	}
	head := string(runes[:cut])
	if i := strings.LastIndexByte(head, ' '); i >= 0 {
		head = head[:i]
	}
	return head + end, nil
}

var wordRe = regexp.MustCompile(`[\p{L}\p{N}_]+`)

func filterWordcount(r *renderer, v any, a *callArgs) (any, error) {
	return int64(len(wordRe.FindAllStringIndex(toStr(v), -1))), nil
}

package template

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// boundMethod is a Python method looked up on a value (message.content.strip,
// tools.items, loop.cycle), called later.
type boundMethod struct {
	recv any
	name string
}

var (
	strMethods = setOf("capitalize", "casefold", "center", "count", "endswith", "find", "format",
		"index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "islower", "isnumeric",
		"isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "partition",
		"removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition",
		"rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title",
		"upper", "zfill")
	dictMethods = setOf("items", "keys", "values", "get", "copy",
		"clear", "pop", "popitem", "setdefault", "update")
	listMethods = setOf("count", "index", "copy",
		"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort")
	// unsafeMethods modify their receiver; the immutable sandbox refuses them.
	unsafeMethods = setOf("clear", "pop", "popitem", "setdefault", "update",
		"append", "extend", "insert", "remove", "reverse", "sort")
)

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// isMethod reports whether obj has a Python method called name.
func isMethod(obj any, name string) bool {
	switch obj.(type) {
	case string:
		return strMethods[name]
	case *OrderedMap:
		return dictMethods[name]
	case []any:
		return listMethods[name]
	case Tuple, pyRange:
		return name == "count" || name == "index"
	case *cycler:
		return name == "next" || name == "reset"
	}
	return false
}

func callMethod(r *renderer, m *boundMethod, a *callArgs) (any, error) {
	switch x := m.recv.(type) {
	case string:
		return callStrMethod(x, m.name, a)
	case *OrderedMap:
		if unsafeMethods[m.name] {
			return nil, fmt.Errorf("SecurityError: access to attribute '%s' of 'dict' object is unsafe.", m.name)
		}
		switch m.name {
		case "items":
			out := make([]any, len(x.keys))
			for i, k := range x.keys {
				out[i] = Tuple{k, x.vals[i]}
			}
			return &dictView{kind: "dict_items", items: out}, nil
		case "keys":
			return &dictView{kind: "dict_keys", items: append([]any(nil), x.keys...)}, nil
		case "values":
			return &dictView{kind: "dict_values", items: append([]any(nil), x.vals...)}, nil
		case "copy":
			return x.copyMap(), nil
		case "get":
			p, err := a.bind("get", []string{"key", "default"}, []any{nil, nil})
			if err != nil {
				return nil, err
			}
			if len(a.pos) == 0 {
				return nil, fmt.Errorf("TypeError: get expected at least 1 argument, got 0")
			}
			if err := checkHashable(p[0]); err != nil {
				return nil, err
			}
			if v, ok := x.getAny(p[0]); ok {
				return v, nil
			}
			return p[1], nil
		}
	case []any, Tuple, pyRange:
		items, _ := iterate(x)
		if unsafeMethods[m.name] {
			return nil, fmt.Errorf("SecurityError: access to attribute '%s' of '%s' object is unsafe.", m.name, typeName(x))
		}
		switch m.name {
		case "copy":
			return append([]any(nil), items...), nil
		case "count":
			if len(a.pos) != 1 {
				return nil, fmt.Errorf("TypeError: count() takes exactly one argument")
			}
			n := int64(0)
			for _, e := range items {
				if equal(e, a.pos[0]) {
					n++
				}
			}
			return n, nil
		case "index":
			if len(a.pos) < 1 {
				return nil, fmt.Errorf("TypeError: index expected at least 1 argument")
			}
			for i, e := range items {
				if equal(e, a.pos[0]) {
					return int64(i), nil
				}
			}
			return nil, fmt.Errorf("ValueError: %s is not in list", reprString(a.pos[0]))
		}
	case *loopContext:
		switch m.name {
		case "cycle":
			if len(a.pos) == 0 {
				return nil, fmt.Errorf("TypeError: no items for cycling given")
			}
			return a.pos[x.index%len(a.pos)], nil
		case "changed":
			v := Tuple(a.pos)
			if x.hasChanged && equal(x.lastChanged, v) {
				return false, nil
			}
			x.hasChanged, x.lastChanged = true, v
			return true, nil
		}
	case *cycler:
		return x.call(m.name, a)
	}
	return nil, fmt.Errorf("AttributeError: '%s' object has no attribute '%s'", typeName(m.recv), m.name)
}

// optStr reads an optional str-or-None argument.
func optStr(v any, what string) (*string, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		return &x, nil
	}
	return nil, fmt.Errorf("TypeError: %s arg must be None or str", what)
}

func intArg(v any, def int) (int, error) {
	switch x := v.(type) {
	case nil:
		return def, nil
	case int64:
		return int(x), nil
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	}
	return 0, fmt.Errorf("TypeError: '%s' object cannot be interpreted as an integer", typeName(v))
}

func callStrMethod(s, name string, a *callArgs) (any, error) {
	arg := func(i int) any {
		if i < len(a.pos) {
			return a.pos[i]
		}
		return nil
	}
	switch name {
	case "strip", "lstrip", "rstrip":
		chars, err := optStr(arg(0), name)
		if err != nil {
			return nil, err
		}
		return pyStrip(s, chars, name != "rstrip", name != "lstrip"), nil
	case "split", "rsplit":
		p, err := a.bind(name, []string{"sep", "maxsplit"}, []any{nil, int64(-1)})
		if err != nil {
			return nil, err
		}
		sep, err := optStr(p[0], "sep")
		if err != nil {
			return nil, err
		}
		if sep != nil && *sep == "" {
			return nil, fmt.Errorf("ValueError: empty separator")
		}
		n, err := intArg(p[1], -1)
		if err != nil {
			return nil, err
		}
		if name == "rsplit" {
			return pyRSplit(s, sep, n), nil
		}
		return pySplit(s, sep, n), nil
	case "startswith", "endswith":
		if len(a.pos) < 1 {
			return nil, fmt.Errorf("TypeError: %s() takes at least 1 argument (0 given)", name)
		}
		sub := s
		if len(a.pos) > 1 {
			start, err := intArg(a.pos[1], 0)
			if err != nil {
				return nil, err
			}
			end := utf8.RuneCountInString(s)
			if len(a.pos) > 2 {
				if end, err = intArg(a.pos[2], end); err != nil {
					return nil, err
				}
			}
			sub = runeSlice(s, start, end)
		}
		var cands []any
		switch x := a.pos[0].(type) {
		case string:
			cands = []any{x}
		case Tuple:
			cands = x
		default:
			return nil, fmt.Errorf("TypeError: %s first arg must be str or a tuple of str, not %s", name, typeName(x))
		}
		for _, c := range cands {
			cs, ok := c.(string)
			if !ok {
				return nil, fmt.Errorf("TypeError: tuple for %s must only contain str", name)
			}
			if name == "startswith" && strings.HasPrefix(sub, cs) || name == "endswith" && strings.HasSuffix(sub, cs) {
				return true, nil
			}
		}
		return false, nil
	case "upper":
		return pyUpper(s), nil
	case "lower", "casefold":
		return pyLower(s), nil
	case "title":
		return pyTitle(s), nil
	case "capitalize":
		return pyCapitalize(s), nil
	case "swapcase":
		var b strings.Builder
		for _, r := range s {
			if unicode.IsUpper(r) {
				b.WriteString(pyLower(string(r)))
			} else {
				b.WriteString(pyUpper(string(r)))
			}
		}
		return b.String(), nil
	case "replace":
		if len(a.pos) < 2 {
			return nil, fmt.Errorf("TypeError: replace expected at least 2 arguments, got %d", len(a.pos))
		}
		old, ok1 := a.pos[0].(string)
		nw, ok2 := a.pos[1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("TypeError: replace() argument must be str")
		}
		n, err := intArg(arg(2), -1)
		if err != nil {
			return nil, err
		}
		if err := replacedFits(s, old, nw, n); err != nil {
			return nil, err
		}
		return strings.Replace(s, old, nw, n), nil
	case "find", "rfind", "index", "rindex", "count":
		if len(a.pos) < 1 {
			return nil, fmt.Errorf("TypeError: %s() takes at least 1 argument (0 given)", name)
		}
		sub, ok := a.pos[0].(string)
		if !ok {
			return nil, fmt.Errorf("TypeError: must be str, not %s", typeName(a.pos[0]))
		}
		start, err := intArg(arg(1), 0)
		if err != nil {
			return nil, err
		}
		end, err := intArg(arg(2), utf8.RuneCountInString(s))
		if err != nil {
			return nil, err
		}
		if start < 0 {
			start = max(start+utf8.RuneCountInString(s), 0)
		}
		hay := runeSlice(s, start, end)
		if name == "count" {
			if sub == "" {
				return int64(utf8.RuneCountInString(hay) + 1), nil
			}
			return int64(strings.Count(hay, sub)), nil
		}
		var i int
		if name == "find" || name == "index" {
			i = strings.Index(hay, sub)
		} else {
			i = strings.LastIndex(hay, sub)
		}
		if i < 0 {
			if name == "index" || name == "rindex" {
				return nil, fmt.Errorf("ValueError: substring not found")
			}
			return int64(-1), nil
		}
		return int64(start + runeIndex(hay, i)), nil
	case "join":
		if len(a.pos) != 1 {
			return nil, fmt.Errorf("TypeError: join() takes exactly one argument")
		}
		items, err := iterate(a.pos[0])
		if err != nil {
			return nil, err
		}
		parts := make([]string, len(items))
		for i, it := range items {
			str, ok := it.(string)
			if !ok {
				return nil, fmt.Errorf("TypeError: sequence item %d: expected str instance, %s found", i, typeName(it))
			}
			parts[i] = str
		}
		return strings.Join(parts, s), nil
	case "removeprefix", "removesuffix":
		p, _ := arg(0).(string)
		if name == "removeprefix" {
			return strings.TrimPrefix(s, p), nil
		}
		return strings.TrimSuffix(s, p), nil
	case "partition", "rpartition":
		sep, ok := arg(0).(string)
		if !ok || sep == "" {
			return nil, fmt.Errorf("ValueError: empty separator")
		}
		var i int
		if name == "partition" {
			i = strings.Index(s, sep)
		} else {
			i = strings.LastIndex(s, sep)
		}
		if i < 0 {
			if name == "partition" {
				return Tuple{s, "", ""}, nil
			}
			return Tuple{"", "", s}, nil
		}
		return Tuple{s[:i], sep, s[i+len(sep):]}, nil
	case "splitlines":
		lines := pySplitlines(s)
		out := make([]any, len(lines))
		for i, l := range lines {
			out[i] = l
		}
		return out, nil
	case "center", "ljust", "rjust", "zfill":
		w, err := intArg(arg(0), 0)
		if err != nil {
			return nil, err
		}
		fill := " "
		if f, ok := arg(1).(string); ok {
			fill = f
		}
		n := utf8.RuneCountInString(s)
		if w <= n {
			return s, nil
		}
		pad := w - n
		if err := repeatFits(max(len(fill), 1), int64(pad), maxText, "a padded string"); err != nil {
			return nil, err
		}
		switch name {
		case "ljust":
			return s + strings.Repeat(fill, pad), nil
		case "rjust":
			return strings.Repeat(fill, pad) + s, nil
		case "zfill":
			if s != "" && (s[0] == '-' || s[0] == '+') {
				return s[:1] + strings.Repeat("0", pad) + s[1:], nil
			}
			return strings.Repeat("0", pad) + s, nil
		}
		left := pad/2 + (pad & w & 1)
		return strings.Repeat(fill, left) + s + strings.Repeat(fill, pad-left), nil
	case "format":
		return strFormat(s, a)
	case "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "islower", "isnumeric",
		"isspace", "istitle", "isupper":
		return strPredicate(s, name), nil
	}
	return nil, fmt.Errorf("AttributeError: 'str' object has no attribute '%s'", name)
}

func strPredicate(s, name string) bool {
	if name == "isascii" {
		return isASCII(s)
	}
	if s == "" {
		return false
	}
	switch name {
	case "islower", "isupper":
		cased := false
		for _, r := range s {
			if unicode.IsUpper(r) || unicode.IsTitle(r) {
				if name == "islower" {
					return false
				}
				cased = true
			} else if unicode.IsLower(r) {
				if name == "isupper" {
					return false
				}
				cased = true
			}
		}
		return cased
	case "istitle":
		return pyTitle(s) == s && strings.IndexFunc(s, pyIsCased) >= 0
	}
	for _, r := range s {
		var ok bool
		switch name {
		case "isalnum":
			ok = unicode.IsLetter(r) || unicode.IsNumber(r)
		case "isalpha":
			ok = unicode.IsLetter(r)
		case "isdecimal", "isdigit":
			ok = unicode.IsDigit(r)
		case "isnumeric":
			ok = unicode.IsNumber(r)
		case "isspace":
			ok = pyIsSpace(r)
		}
		if !ok {
			return false
		}
	}
	return true
}

// strFormat is str.format for "{}", "{0}", "{name}" and "{{"/"}}" with an
// optional !r/!s conversion; format specs are not supported.
func strFormat(s string, a *callArgs) (any, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '}' {
			if i+1 < len(s) && s[i+1] == '}' {
				i++
			}
			b.WriteByte('}')
			continue
		}
		if c != '{' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(s) && s[i+1] == '{' {
			b.WriteByte('{')
			i++
			continue
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return nil, fmt.Errorf("ValueError: Single '{' encountered in format string")
		}
		field := s[i+1 : i+end]
		i += end
		conv := byte('s')
		if k := strings.IndexByte(field, '!'); k >= 0 && k+1 < len(field) {
			conv = field[k+1]
			field = field[:k]
		}
		if k := strings.IndexByte(field, ':'); k >= 0 {
			field = field[:k]
		}
		var v any
		if field == "" {
			if auto >= len(a.pos) {
				return nil, fmt.Errorf("IndexError: Replacement index %d out of range", auto)
			}
			v = a.pos[auto]
			auto++
		} else if n, err := intArg(parseIntMaybe(field), -1); err == nil && n >= 0 {
			if n >= len(a.pos) {
				return nil, fmt.Errorf("IndexError: Replacement index %d out of range", n)
			}
			v = a.pos[n]
		} else {
			found := false
			for _, k := range a.kw {
				if k.name == field {
					v, found = k.v, true
				}
			}
			if !found {
				return nil, fmt.Errorf("KeyError: %s", reprString(field))
			}
		}
		if conv == 'r' {
			b.WriteString(reprString(v))
		} else {
			b.WriteString(toStr(v))
		}
	}
	return b.String(), nil
}

func parseIntMaybe(s string) any {
	n := int64(0)
	if s == "" {
		return s
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return s
		}
		n = n*10 + int64(r-'0')
	}
	return n
}

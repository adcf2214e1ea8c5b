package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxJSONDepth is how deeply arrays and objects may nest in DecodeJSON's
// input. DecodeJSON reads client data (chat_template_kwargs, tool parameters,
// tool-call arguments), and every later step that walks a value (rendering,
// tojson, comparison) recurses once per level, so the depth must be bounded
// where the data enters. Real tool schemas nest a handful of levels; 128
// leaves ample room and keeps every walk's stack small.
const MaxJSONDepth = 128

// MaxJSONBytes is the largest input DecodeJSON accepts. It is checked before
// any parsing, so an oversized document costs nothing; 16 MiB is four times
// gRPC's default maximum message size, so no legitimate request reaches it.
const MaxJSONBytes = 16 << 20

// ErrJSONTooDeep and ErrJSONTooLarge are the limit errors of DecodeJSON; the
// returned errors wrap them and name the limit.
var (
	ErrJSONTooDeep  = errors.New("template: JSON nesting too deep")
	ErrJSONTooLarge = errors.New("template: JSON document too large")
)

// DecodeJSON parses JSON into template values the way Python's json.loads
// does: objects become *OrderedMap in document order, integral number
// literals ("1", "-3") become int64, others ("1.0", "1e3") float64.
//
// Input longer than MaxJSONBytes or nested deeper than MaxJSONDepth is
// rejected with an error wrapping ErrJSONTooLarge or ErrJSONTooDeep.
func DecodeJSON(data []byte) (any, error) {
	if len(data) > MaxJSONBytes {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d (MaxJSONBytes)", ErrJSONTooLarge, len(data), MaxJSONBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return nil, errors.New("template: trailing data after JSON value")
		}
		return nil, err
	}
	return v, nil
}

// decodeValue reads one value at nesting depth depth (0 for the document).
func decodeValue(dec *json.Decoder, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= MaxJSONDepth {
			return nil, fmt.Errorf("%w: more than %d levels of arrays and objects (MaxJSONDepth)", ErrJSONTooDeep, MaxJSONDepth)
		}
		switch t {
		case '{':
			m := NewOrderedMap()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("template: object key is %T", kt)
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				m.setAny(k, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return m, nil
		case '[':
			list := []any{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return list, nil
		}
		return nil, fmt.Errorf("template: unexpected %v", t)
	case json.Number:
		s := string(t)
		if !strings.ContainsAny(s, ".eE") {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return i, nil
			}
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, err
		}
		return f, nil // out of range: ±Inf, as Python's float() gives
	default:
		return tok, nil // string, bool, nil
	}
}

// jsonOptions are the arguments of transformers' tojson filter, which is
// json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=False) rather than Jinja's HTML-safe tojson.
type jsonOptions struct {
	ensureASCII bool
	indent      string // "" with hasIndent=false: no newlines
	hasIndent   bool
	itemSep     string
	keySep      string
	sortKeys    bool
}

func newJSONOptions(indent any, separators any, ensureASCII, sortKeys bool) (jsonOptions, error) {
	o := jsonOptions{ensureASCII: ensureASCII, sortKeys: sortKeys, itemSep: ", ", keySep: ": "}
	switch x := indent.(type) {
	case nil, Undefined:
	case int64:
		o.hasIndent = true
		if x > maxJSONIndent {
			return o, fmt.Errorf("MemoryError: tojson indent %d is past the renderer's bound of %d", x, maxJSONIndent)
		}
		if x > 0 {
			o.indent = strings.Repeat(" ", int(x))
		}
	case bool:
		o.hasIndent = true
		if x {
			o.indent = " "
		}
	case string:
		if len(x) > maxJSONIndent {
			return o, fmt.Errorf("MemoryError: tojson indent of %d bytes is past the renderer's bound of %d", len(x), maxJSONIndent)
		}
		o.hasIndent = true
		o.indent = x
	default:
		return o, fmt.Errorf("TypeError: tojson indent must be int or str, not %s", typeName(indent))
	}
	if o.hasIndent {
		o.itemSep = ","
	}
	switch x := separators.(type) {
	case nil, Undefined:
	case []any, Tuple:
		items, _ := iterItems(x)
		if len(items) != 2 {
			return o, errors.New("ValueError: separators must be a pair")
		}
		a, ok1 := items[0].(string)
		b, ok2 := items[1].(string)
		if !ok1 || !ok2 {
			return o, errors.New("TypeError: separators must be strings")
		}
		o.itemSep, o.keySep = a, b
	default:
		return o, errors.New("TypeError: separators must be a pair")
	}
	return o, nil
}

// dumpJSON is Python's json.dumps with the given options.
func dumpJSON(v any, o jsonOptions) (string, error) {
	var b strings.Builder
	if err := writeJSON(&b, v, o, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeJSONNewline(b *strings.Builder, o jsonOptions, level int) {
	b.WriteByte('\n')
	for range level {
		b.WriteString(o.indent)
	}
}

func writeJSON(b *strings.Builder, v any, o jsonOptions, level int) error {
	if level > maxValueDepth {
		return errTooDeep("tojson")
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		switch {
		case math.IsNaN(x):
			b.WriteString("NaN")
		case math.IsInf(x, 1):
			b.WriteString("Infinity")
		case math.IsInf(x, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(floatRepr(x))
		}
	case string:
		writeJSONString(b, x, o.ensureASCII)
	case []any:
		return writeJSONArray(b, x, o, level)
	case Tuple:
		return writeJSONArray(b, x, o, level)
	case *OrderedMap:
		if x.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		order := make([]int, x.Len())
		for i := range order {
			order[i] = i
		}
		if o.sortKeys {
			var err error
			order, err = sortedKeyOrder(x)
			if err != nil {
				return err
			}
		}
		b.WriteByte('{')
		for n, i := range order {
			if n > 0 {
				b.WriteString(o.itemSep)
			}
			if o.hasIndent {
				writeJSONNewline(b, o, level+1)
			}
			var ks string
			switch k := x.keys[i].(type) {
			case string:
				ks = k
			case bool:
				ks = "false"
				if k {
					ks = "true"
				}
			case nil:
				ks = "null"
			case int64, float64:
				var kb strings.Builder
				_ = writeJSON(&kb, k, o, 0)
				ks = kb.String()
			default:
				return fmt.Errorf("TypeError: keys must be str, int, float, bool or None, not %s", typeName(k))
			}
			writeJSONString(b, ks, o.ensureASCII)
			b.WriteString(o.keySep)
			if err := writeJSON(b, x.vals[i], o, level+1); err != nil {
				return err
			}
		}
		if o.hasIndent {
			writeJSONNewline(b, o, level)
		}
		b.WriteByte('}')
	case *generator:
		return errors.New("TypeError: Object of type generator is not JSON serializable")
	default:
		return fmt.Errorf("TypeError: Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func sortedKeyOrder(m *OrderedMap) ([]int, error) {
	order := make([]int, m.Len())
	for i := range order {
		order[i] = i
	}
	var err error
	stableSort(order, func(a, b int) bool {
		lt, e := lessThan(m.keys[a], m.keys[b])
		if e != nil && err == nil {
			err = e
		}
		return lt
	})
	return order, err
}

func writeJSONArray(b *strings.Builder, items []any, o jsonOptions, level int) error {
	if len(items) == 0 {
		b.WriteString("[]")
		return nil
	}
	b.WriteByte('[')
	for i, e := range items {
		if i > 0 {
			b.WriteString(o.itemSep)
		}
		if o.hasIndent {
			writeJSONNewline(b, o, level+1)
		}
		if err := writeJSON(b, e, o, level+1); err != nil {
			return err
		}
	}
	if o.hasIndent {
		writeJSONNewline(b, o, level)
	}
	b.WriteByte(']')
	return nil
}

// writeJSONString quotes s as Python's json module does.
func writeJSONString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch c {
			case '"':
				b.WriteString(`\"`)
			case '\\':
				b.WriteString(`\\`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			default:
				if c < 0x20 {
					fmt.Fprintf(b, `\u%04x`, c)
				} else {
					b.WriteByte(c)
				}
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if ensureASCII {
			if r >= 0x10000 {
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			} else {
				fmt.Fprintf(b, `\u%04x`, r)
			}
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
}

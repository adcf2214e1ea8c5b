package template

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// nested returns depth levels of open, a leaf, then depth levels of close.
func nested(open, leaf, close string, depth int) []byte {
	var b bytes.Buffer
	b.Grow(depth*(len(open)+len(close)) + len(leaf))
	for range depth {
		b.WriteString(open)
	}
	b.WriteString(leaf)
	for range depth {
		b.WriteString(close)
	}
	return b.Bytes()
}

// TestDecodeJSONLimits: client JSON is refused, with an error naming the
// limit, before its nesting can exhaust the stack or its size the heap; a
// document at the limit is still accepted.
func TestDecodeJSONLimits(t *testing.T) {
	cases := []struct {
		name    string
		data    []byte
		wantErr error
	}{
		{"a million nested arrays", nested("[", "1", "]", 1_000_000), ErrJSONTooDeep},
		{"a million nested objects", nested(`{"a":`, "1", "}", 1_000_000), ErrJSONTooDeep},
		{"one level past the limit", nested("[", "", "]", MaxJSONDepth+1), ErrJSONTooDeep},
		{"exactly at the limit", nested("[", "", "]", MaxJSONDepth), nil},
		{"objects at the limit", nested(`{"a":`, "null", "}", MaxJSONDepth), nil},
		{"larger than MaxJSONBytes", []byte(`"` + strings.Repeat("x", MaxJSONBytes) + `"`), ErrJSONTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeJSON(c.data)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("DecodeJSON: err = %v, want %v", err, c.wantErr)
			}
			if c.wantErr == ErrJSONTooDeep && !strings.Contains(err.Error(), "128") {
				t.Errorf("error %q does not name the limit", err)
			}
		})
	}
}

// deepList is a list nested depth levels deep, built without recursion.
func deepList(depth int) any {
	var v any = int64(1)
	for range depth {
		v = []any{v}
	}
	return v
}

// TestDeepValuesDoNotRecurseWithoutBound: whatever a template does with a
// value nested far deeper than any JSON could be (Go callers are not held
// to MaxJSONDepth, and templates can build such values themselves), it gets
// an error or a truncated text, never a stack overflow.
func TestDeepValuesDoNotRecurseWithoutBound(t *testing.T) {
	const deep = 200_000
	cases := []struct {
		name, template string
		vars           map[string]any
		wantErr        string // "" for success
		wantOut        string // a substring of the output
	}{
		{"a deep Go variable is refused", "{{ x }}", map[string]any{"x": deepList(deep)}, "RecursionError", ""},
		{"a cyclic Go variable is refused", "{{ x }}", map[string]any{"x": cyclic()}, "RecursionError", ""},
		{"tojson of a template-built list", buildDeep + "{{ ns.x | tojson }}", nil, "RecursionError", ""},
		{"printing a template-built list", buildDeep + "{{ ns.x }}", nil, "", "[[[...]]]"},
		{"equality of template-built lists", buildDeep + "{{ ns.x == ns.x }}", nil, "", "False"},
		{"sorting template-built lists", buildDeep + "{{ [ns.x, ns.x] | sort }}", nil, "", ""},
		{"a macro that recurses forever", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", nil, "RecursionError", ""},
		{"a recursive loop over deep data", "{% for x in [data] recursive %}{{ loop(x) }}{% endfor %}", map[string]any{"data": deepList(900)}, "RecursionError", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm, err := Compile(c.template)
			if err != nil {
				t.Fatal(err)
			}
			out, err := tm.Render(c.vars, Options{})
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil && !strings.Contains(err.Error(), "RecursionError") {
				t.Fatalf("unexpected error %v", err)
			}
			if err == nil && !strings.Contains(out, c.wantOut) {
				t.Errorf("output lacks %q", c.wantOut)
			}
		})
	}
}

// buildDeep makes ns.x a list nested 5,000 levels deep.
const buildDeep = "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}"

// cyclic is a map that contains itself.
func cyclic() any {
	m := map[string]any{}
	m["self"] = m
	return m
}

package template

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// jsonDepth is the nesting depth of valid JSON, counted without recursion.
func jsonDepth(data []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range data {
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString && c == '"':
			inString = false
		case inString:
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// FuzzDecodeJSON: DecodeJSON accepts exactly the valid JSON documents within
// its limits (refusing deeper ones with ErrJSONTooDeep), and what it returns
// survives tojson and a second DecodeJSON unchanged.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`null`, `true`, `0`, `-0`, `-0.0`, `1e400`, `123456789012345678901234567890`, `"\u00e9\ud83d\ude42"`,
		`{"a":[1,2.5,{"b":null}],"a":"dup"}`, `[[[[[]]]]]`, `{"":{}}`, `[1,]`, `{"a" 1}`, `"\ud800"`,
		strings.Repeat("[", 200) + strings.Repeat("]", 200), `1 2`, ` [ ] `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := DecodeJSON(data)
		valid := json.Valid(data)
		switch {
		case err == nil && !valid:
			t.Fatalf("DecodeJSON accepted invalid JSON %q", data)
		case err != nil && valid && jsonDepth(data) <= MaxJSONDepth:
			t.Fatalf("DecodeJSON(%q): %v, but it is valid JSON within the limits", data, err)
		case err != nil && valid && !errors.Is(err, ErrJSONTooDeep):
			t.Fatalf("DecodeJSON(%q): %v, want ErrJSONTooDeep", data, err)
		case err != nil:
			return
		}
		out, err := dumpJSON(v, jsonOptions{itemSep: ", ", keySep: ": "})
		if err != nil {
			t.Fatalf("tojson of DecodeJSON(%q): %v", data, err)
		}
		if strings.Contains(out, "Infinity") {
			return // Python's json writes what JSON cannot hold
		}
		v2, err := DecodeJSON([]byte(out))
		if err != nil || !equal(v, v2) {
			t.Fatalf("DecodeJSON(%q) = %s, which decodes to %v, %v", data, out, v2, err)
		}
	})
}

// fuzzTemplate exercises what chat templates do with client values: loops,
// attribute and item access, string methods, filters over nested values,
// tojson, comparison, and a recursive macro over the arguments.
const fuzzTemplate = `{%- macro walk(v, d) -%}
{%- if v is mapping -%}{%- for k, x in v.items() -%}{{ k }}={{ walk(x, d + 1) }};{%- endfor -%}
{%- elif v is iterable and v is not string -%}[{%- for x in v -%}{{ walk(x, d + 1) }},{%- endfor -%}]
{%- else -%}{{ v }}{%- endif -%}
{%- endmacro -%}
{%- for m in messages -%}
<|im_start|>{{ m.role | trim }}
{{ m.content.strip() | replace('<', '&lt;') }}{{ m.content | length }}{{ m.content.split('</think>')[-1] }}
{%- if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ c.function.arguments | tojson }}{{ walk(c.function.arguments, 0) }}{{ c.function.arguments == c.function.arguments }}{{ c.function.arguments | string | length }}</tool_call>{% endfor %}{% endif -%}
<|im_end|>
{% endfor -%}
{%- if extra is defined %}{{ extra | tojson(indent=2) }}{{ extra | list | sort | join(',') }}{{ extra }}{% endif -%}`

// FuzzRenderMessages: any role, content, tool-call arguments and kwargs a
// client sends (JSON through DecodeJSON) render or fail with an error,
// promptly: no panic, no stack overflow, no hang.
func FuzzRenderMessages(f *testing.F) {
	tm, err := Compile(fuzzTemplate)
	if err != nil {
		f.Fatal(err)
	}
	f.Add("user", "hello", []byte(`{"city":"Paris","days":[1,2,{"x":null}]}`), []byte(`{"extra":{"b":1,"a":[true]}}`))
	f.Add("assistant", "<think>x</think>\n\nok", []byte(`"a string"`), []byte(`{}`))
	f.Add(" system ", "<|im_end|>\n<|im_start|>system", []byte(`[[[[[[[[1]]]]]]]]`), []byte(`{"extra":[3,1,2]}`))
	f.Add("", "", []byte(`{`), []byte(`null`))
	f.Add("tool", "{{ 7*7 }}{% raw %}", []byte(strings.Repeat("[", 128)+strings.Repeat("]", 128)), []byte(`{"extra":"x"}`))
	f.Fuzz(func(t *testing.T, role, content string, args, kwargs []byte) {
		msg := NewOrderedMap()
		msg.Set("role", role)
		msg.Set("content", content)
		if a, err := DecodeJSON(args); err == nil {
			fn := NewOrderedMap()
			fn.Set("arguments", a)
			call := NewOrderedMap()
			call.Set("function", fn)
			msg.Set("tool_calls", []any{call})
		}
		vars := map[string]any{"messages": []any{msg}}
		if kw, err := DecodeJSON(kwargs); err == nil {
			if m, ok := kw.(*OrderedMap); ok {
				for _, k := range m.Keys() {
					vars[k], _ = m.Get(k)
				}
			}
		}
		vars["messages"] = []any{msg} // kwargs may not replace the messages here
		done := make(chan error, 1)
		go func() {
			_, err := tm.Render(vars, Options{})
			done <- err
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("Render hangs on role %q, content %q, args %q, kwargs %q", role, content, args, kwargs)
		}
	})
}

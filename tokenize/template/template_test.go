package template

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRender pins the behaviours chat templates lean on most. The expected
// strings are what Python Jinja2 3.1.6, configured as transformers does,
// renders for the same template and variables (JSON, decoded in order).
func TestRender(t *testing.T) {
	cases := []struct {
		name, template, vars, want string
	}{
		{"trim_blocks", `{% if true %}
x
{% endif %}
y`, "", `x
y`},
		{"lstrip_blocks", `a
    {% if true %}b{% endif %}
c`, "", `a
bc`},
		{"minus strips both sides", "a  {%- if true -%}  b  {%- endif -%}  c", "", "abc"},
		{"plus keeps indentation", `a
  {%+ if true %}b{% endif %}`, "", `a
  b`},
		{"variables are not lstripped", `a
  {{ 'b' }}
`, "", `a
  b`},
		{"comment line vanishes", `a
  {# note #}
b`, "", `a
b`},
		{"loop variables", "{% for x in 'abc' %}{{ loop.index }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.previtem }} {% endfor %}", "", "12TrueFalse 21FalseFalsea 30FalseTrueb "},
		{"loop filter counts kept items", "{% for m in msgs if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}:{{ m.role }} {% endfor %}", `{"msgs": [{"role": "system"}, {"role": "user"}, {"role": "assistant"}]}`, "1/2:user 2/2:assistant "},
		{"set in loop does not leak", "{% set n = 0 %}{% for i in [1, 2] %}{% set n = n + i %}{% endfor %}{{ n }}", "", "0"},
		{"namespace carries out of loops", "{% set ns = namespace(n=0) %}{% for i in [1, 2] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", "", "3"},
		{"dict order is insertion order", "{{ d }} {% for k, v in d|items %}{{ k }}={{ v }} {% endfor %}{{ d.keys()|list }}", `{"d": {"z": 1, "a": [1, 2], "m": {"k": "é"}}}`, "{'z': 1, 'a': [1, 2], 'm': {'k': 'é'}} z=1 a=[1, 2] m={'k': 'é'} ['z', 'a', 'm']"},
		{"dict equality ignores order", "{{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}", "", "True"},
		{"tojson compact", "{{ d|tojson }}", `{"d": {"z": 1, "a": [1, 2], "m": {"k": "é"}}}`, `{"z": 1, "a": [1, 2], "m": {"k": "é"}}`},
		{"tojson indent", "{{ d|tojson(indent=2) }}", `{"d": {"z": 1, "a": [1, 2], "m": {"k": "é"}}}`, `{
  "z": 1,
  "a": [
    1,
    2
  ],
  "m": {
    "k": "é"
  }
}`},
		{"tojson separators and unicode", "{{ ['é', 1.0, none]|tojson(separators=(',', ':')) }}", "", `["é",1.0,null]`},
		{"python repr", `{{ [1, 1.0, 'it\'s', none, true, (1,), {'k': 'v'}] }} {{ 1e16 }} {{ 0.00001 }}`, "", `[1, 1.0, "it's", None, True, (1,), {'k': 'v'}] 1e+16 1e-05`},
		{"undefined prints empty", "[{{ nope }}][{{ nope|default('d') }}][{{ nope is defined }}][{{ {}.x }}]", "", "[][d][False][]"},
		{"undefined iterates empty", "{% for x in nope %}x{% else %}empty{% endfor %}", "", "empty"},
		{"macro defaults", "{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(a=3) }}", "", "1B123B"},
		{"macro varargs and kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }}", "", "1(2, 3){'k': 'v'}"},
		{"macro caller", "{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}inside{% endcall %}", "", "[inside]"},
		{"slicing", "{{ 'hello'[::-1] }} {{ [1, 2, 3][1:] }} {{ [1, 2, 3][-1] }} {{ 'abc'[:-1] }}", "", "olleh [2, 3] 3 ab"},
		{"inline if without else", "[{{ 'x' if false }}]", "", "[]"},
		{"parenthesised inline if", "{{ ('a' if true else 'b') ~ 'c' }}", "", "ac"},
		{"generation block", "{% generation %}answer{% endgeneration %}", "", "answer"},
		{"strftime_now", "{{ strftime_now('%d %B %Y') }}", "", "10 July 2025"},
		{"string methods", "{{ ' a b '.strip().split(' ') }} {{ 'x'.upper() }} {{ 'ab'.startswith('a') }}", "", "['a', 'b'] X True"},
		{"selectattr", "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='role')|list }}", `{"msgs": [{"role": "system"}, {"role": "user"}]}`, "['user']"},
		{"indent", `{{ 'a\nb\n\nc'|indent(2, first=true) }}`, "", `  a
  b

  c`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vars := map[string]any{}
			if c.vars != "" {
				v, err := DecodeJSON([]byte(c.vars))
				if err != nil {
					t.Fatal(err)
				}
				vars = varsOf(v.(*OrderedMap))
			}
			got, err := render(c.template, vars)
			if err != nil {
				t.Fatalf("render %q: %v", c.template, err)
			}
			if got != c.want {
				t.Errorf("render %q\n got %q\nwant %q", c.template, got, c.want)
			}
		})
	}
}

func TestRaiseException(t *testing.T) {
	tpl, err := Compile("{% if messages|length == 0 %}{{ raise_exception('No messages: ' ~ 0) }}{% endif %}ok")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tpl.Render(map[string]any{"messages": []any{}}, Options{})
	if !errors.Is(err, ErrTemplateRaised) {
		t.Fatalf("error %v does not wrap ErrTemplateRaised", err)
	}
	if err.Error() != "No messages: 0" {
		t.Errorf("message %q, want the template's own", err.Error())
	}
	if got, err := tpl.Render(map[string]any{"messages": []any{"x"}}, Options{}); err != nil || got != "ok" {
		t.Errorf("got %q, %v", got, err)
	}
}

func TestSyntaxErrorLine(t *testing.T) {
	for _, c := range []struct {
		src  string
		line int
	}{
		{"a\nb\n{{ 1 + }}", 3},
		{"{% if x %}\n\n{% for %}", 3},
		{"line\n{% if true %}\nnever closed", 3},
		{"{{ x|no_such_filter }}", 1},
		{"\n{% unknown %}", 2},
	} {
		_, err := Compile(c.src)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Compile(%q) = %v, want a *SyntaxError", c.src, err)
			continue
		}
		if se.Line != c.line {
			t.Errorf("Compile(%q): line %d, want %d (%v)", c.src, se.Line, c.line, err)
		}
	}
}

func TestDecodeJSON(t *testing.T) {
	v, err := DecodeJSON([]byte(`{"b": 1, "a": 1.0, "c": [1e2, -3, "x", null, true], "d": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	m := v.(*OrderedMap)
	if got := strings.Join(m.Keys(), ","); got != "b,a,c,d" {
		t.Errorf("keys %s, want document order", got)
	}
	if b, _ := m.Get("b"); b != int64(1) {
		t.Errorf("1 decoded as %T, want int64", b)
	}
	if a, _ := m.Get("a"); a != 1.0 {
		t.Errorf("1.0 decoded as %T %v, want float64", a, a)
	}
	if got := reprString(m); got != "{'b': 1, 'a': 1.0, 'c': [100.0, -3, 'x', None, True], 'd': {}}" {
		t.Errorf("repr %s", got)
	}
	if _, err := DecodeJSON([]byte(`{} {}`)); err == nil {
		t.Error("trailing data accepted")
	}
}

func TestGoValues(t *testing.T) {
	// Plain Go maps render in sorted key order; Go ints are Python ints.
	got, err := render("{{ m }} {{ n + 1 }} {{ l }}", map[string]any{
		"m": map[string]any{"b": 2, "a": []string{"x"}},
		"n": 41,
		"l": []any{int32(1), float32(0.5), nil},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "{'a': ['x'], 'b': 2} 42 [1, 0.5, None]"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestClock(t *testing.T) {
	tpl, err := Compile("{{ strftime_now('%Y-%m-%d %H:%M') }}")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2024, 2, 29, 23, 5, 0, 0, time.UTC)
	got, err := tpl.Render(nil, Options{Now: func() time.Time { return at }})
	if err != nil || got != "2024-02-29 23:05" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := tpl.Render(nil, Options{}); err != nil {
		t.Errorf("default clock: %v", err)
	}
}

func TestIntOverflowIsAnError(t *testing.T) {
	if got, err := render("{{ 10 ** 20 }}", nil); err == nil {
		t.Errorf("got %q, want an overflow error (Python would print 100000000000000000000)", got)
	}
}

// TestConcurrentRender renders one compiled template from many goroutines;
// run with -race.
func TestConcurrentRender(t *testing.T) {
	cases := loadCases(t)
	var wg sync.WaitGroup
	for _, c := range cases[:16] {
		tpl, err := Compile(c.template)
		if err != nil {
			t.Fatal(err)
		}
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := tpl.Render(varsOf(c.data), Options{Now: fixedNow})
				if err != nil || got != c.expected {
					t.Errorf("%s: concurrent render differs (%v)", c.name, err)
				}
			}()
		}
	}
	wg.Wait()
}

package template

import (
	"strings"
	"testing"
)

// TestRenderBounds: a template that loops or grows a value without end
// fails with a MemoryError naming the bound it passed, instead of running
// the process out of time or memory; the same forms at a sane size render.
func TestRenderBounds(t *testing.T) {
	tests := []struct {
		name, template string
		wantErr        string // "" for success
	}{
		{"nested loops", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "loop iterations"},
		{"a macro called without end", "{% macro f() %}{% endmacro %}{% for i in range(100000) %}{% for j in range(100000) %}{{ f() }}{% endfor %}{% endfor %}", "macro calls"},
		{"a string doubled", "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "a string of"},
		{"a string doubled with +", "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "a string of"},
		{"a list doubled", "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", "a list of"},
		{"a string repeated past int64", "{{ 'xx' * 9223372036854775807 }}", "a string of 2 × 9223372036854775807"},
		{"a string repeated", "{{ 'x' * 2000000000 }}", "a string of 1 × 2000000000"},
		{"a list repeated", "{{ [1, 2] * 1000000000 }}", "a list of"},
		{"a padded string", "{{ 'x'.ljust(1000000000) }}", "a padded string"},
		{"a replacement that multiplies", "{{ ('x' * 1000).replace('', 'y' * 100000) }}", "a string"},
		{"the replace filter", "{{ ('x' * 1000) | replace('x', 'y' * 100000) }}", "a string"},
		{"an indent", "{{ 'a\nb' | indent(1000000000) }}", "a string of"},
		{"an indent of a long string on many lines", "{{ ('a\n' * 100000) | indent('x' * 100000) }}", "an indented string"},
		{"a tojson indent", "{{ [[1]] | tojson(indent=100000000) }}", "tojson indent"},
		{"output without end", "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "its output"},
		{"sane sizes", "{% set ns = namespace(s='x') %}{% for i in range(10) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}" +
			"{{ ns.s | length }} {{ ('ab' * 3).replace('a', 'xyz') }} {{ 'x'.ljust(5, '-') }} {{ [1] * 3 }} {{ [[1]] | tojson(indent=2) }}" +
			" {{ 'a\nb' | indent(-5) }}", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, err := Compile(tt.template)
			if err != nil {
				t.Fatal(err)
			}
			out, err := tp.Render(nil, Options{})
			if tt.wantErr == "" {
				if err != nil || out != "1024 xyzbxyzbxyzb x---- [1, 1, 1] [\n  [\n    1\n  ]\n] a\nb" {
					t.Fatalf("Render = %q, %v", out, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "MemoryError") || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Render: %v (%d bytes out); want a MemoryError naming %q", err, len(out), tt.wantErr)
			}
		})
	}
}

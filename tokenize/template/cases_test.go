package template

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// fixedNow is the clock the reference outputs were rendered with.
func fixedNow() time.Time { return time.Date(2025, 7, 10, 12, 0, 0, 0, time.UTC) }

type renderCase struct {
	name     string
	template string
	data     *OrderedMap
	expected string
}

// loadCases reads testdata/cases.json in file order.
func loadCases(tb testing.TB) []renderCase {
	tb.Helper()
	raw, err := os.ReadFile("testdata/cases.json")
	if err != nil {
		tb.Fatal(err)
	}
	v, err := DecodeJSON(raw)
	if err != nil {
		tb.Fatal(err)
	}
	all := v.(*OrderedMap)
	var cases []renderCase
	for _, name := range all.Keys() {
		c, _ := all.Get(name)
		cm := c.(*OrderedMap)
		tpl, _ := cm.Get("chat_template")
		data, _ := cm.Get("data")
		exp, _ := cm.Get("expected")
		cases = append(cases, renderCase{name: name, template: tpl.(string), data: data.(*OrderedMap), expected: exp.(string)})
	}
	return cases
}

func varsOf(m *OrderedMap) map[string]any {
	vars := make(map[string]any, m.Len())
	for _, k := range m.Keys() {
		vars[k], _ = m.Get(k)
	}
	return vars
}

// firstDiff describes where got and want first differ.
func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(i-60, 0)
	return fmt.Sprintf("first difference at byte %d (got %d bytes, want %d)\n got: %q\nwant: %q",
		i, len(got), len(want), got[lo:min(i+60, len(got))], want[lo:min(i+60, len(want))])
}

func TestCases(t *testing.T) {
	cases := loadCases(t)
	if len(cases) != 64 {
		t.Fatalf("cases.json has %d cases, want 64", len(cases))
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, "/", "_"), func(t *testing.T) {
			tpl, err := Compile(c.template)
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			got, err := tpl.Render(varsOf(c.data), Options{Now: fixedNow})
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			if got != c.expected {
				t.Errorf("%s", firstDiff(got, c.expected))
			}
		})
	}
}

func BenchmarkRender(b *testing.B) {
	cases := loadCases(b)
	tpls := make([]*Template, len(cases))
	vars := make([]map[string]any, len(cases))
	for i, c := range cases {
		var err error
		if tpls[i], err = Compile(c.template); err != nil {
			b.Fatal(err)
		}
		vars[i] = varsOf(c.data)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i, tpl := range tpls {
			if _, err := tpl.Render(vars[i], Options{Now: fixedNow}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(tpls)), "µs/render")
}

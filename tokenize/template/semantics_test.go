package template

import (
	"errors"
	"os"
	"testing"
)

// TestSemantics renders the small templates of testdata/semantics.json,
// each pinning one piece of Jinja/Python behaviour, and compares them with
// what Python Jinja2 produced (testdata/regen.py --semantics).
func TestSemantics(t *testing.T) {
	raw, err := os.ReadFile("testdata/semantics.json")
	if err != nil {
		t.Fatal(err)
	}
	v, err := DecodeJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	doc := v.(*OrderedMap)
	shared, _ := doc.Get("data")
	list, _ := doc.Get("cases")
	for _, c := range list.([]any) {
		cm := c.(*OrderedMap)
		get := func(k string) any { v, _ := cm.Get(k); return v }
		name, src := get("name").(string), get("template").(string)
		t.Run(name, func(t *testing.T) {
			vars := varsOf(shared.(*OrderedMap))
			if d, ok := get("data").(*OrderedMap); ok {
				for k, v := range varsOf(d) {
					vars[k] = v
				}
			}
			got, err := render(src, vars)
			if want, ok := get("expected").(string); ok {
				if err != nil {
					t.Fatalf("template %q: unexpected error %v; want %q", src, err, want)
				}
				if got != want {
					t.Fatalf("template %q:\n got %q\nwant %q", src, got, want)
				}
				return
			}
			kind, _ := get("error_type").(string)
			msg, _ := get("error").(string)
			if err == nil {
				t.Fatalf("template %q: got %q, want %s: %s", src, got, kind, msg)
			}
			switch kind {
			case "TemplateError":
				var raised *RaisedError
				if !errors.As(err, &raised) || !errors.Is(err, ErrTemplateRaised) || err.Error() != msg {
					t.Fatalf("template %q: error %v, want raised %q", src, err, msg)
				}
			case "TemplateSyntaxError":
				var se *SyntaxError
				if !errors.As(err, &se) {
					t.Fatalf("template %q: error %v, want a syntax error (%s)", src, err, msg)
				}
				if line, ok := get("error_line").(int64); ok && int64(se.Line) != line {
					t.Fatalf("template %q: syntax error on line %d, want %d", src, se.Line, line)
				}
			}
		})
	}
}

func render(src string, vars map[string]any) (string, error) {
	tpl, err := Compile(src)
	if err != nil {
		return "", err
	}
	return tpl.Render(vars, Options{Now: fixedNow})
}

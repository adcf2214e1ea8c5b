package template

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"testing"
)

// TestCross renders every template of cases.json with the variables of
// every case, and again with add_generation_prompt flipped (8,192 renders),
// and compares each with Python Jinja2's result recorded in
// testdata/cross.json (regen.py --cross): a short SHA-256 of the text,
// "raise:<message>" for raise_exception, or "error" for another failure.
// It exercises branches the 64 reference inputs leave cold: missing
// bos_token, tools where none were expected, content lists, and so on.
func TestCross(t *testing.T) {
	raw, err := os.ReadFile("testdata/cross.json")
	if err != nil {
		t.Fatal(err)
	}
	v, err := DecodeJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := v.(*OrderedMap)
	cases := loadCases(t)
	var variants []map[string]any
	for _, c := range cases {
		variants = append(variants, varsOf(c.data))
	}
	for _, c := range cases {
		vars := varsOf(c.data)
		agp, _ := vars["add_generation_prompt"].(bool)
		vars["add_generation_prompt"] = !agp
		variants = append(variants, vars)
	}
	for _, c := range cases {
		row, ok := want.Get(c.name)
		if !ok {
			t.Fatalf("cross.json has no row for %s", c.name)
		}
		expected := row.([]any)
		if len(expected) != len(variants) {
			t.Fatalf("%s: %d results, want %d", c.name, len(expected), len(variants))
		}
		tpl, err := Compile(c.template)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for i, vars := range variants {
			got, err := tpl.Render(vars, Options{Now: fixedNow})
			var outcome string
			var raised *RaisedError
			switch {
			case errors.As(err, &raised):
				outcome = "raise:" + raised.Message
			case err != nil:
				outcome = "error"
			default:
				sum := sha256.Sum256([]byte(got))
				outcome = hex.EncodeToString(sum[:8])
			}
			if outcome != expected[i].(string) {
				t.Errorf("%s with the variables of case %d: got %s (err %v), want %s", c.name, i, outcome, err, expected[i])
			}
		}
	}
}

package parse

import (
	"encoding/json"
	"strings"
	"testing"
)

// scanWhole reports whether s is one JSON object or array, as the scanner
// sees it: every byte accepted and the value complete, whitespace around
// it allowed.
func scanWhole(s string) bool {
	var sc jsonScanner
	sc.reset()
	t := strings.TrimRight(s, " \t\r\n")
	for i := range len(t) {
		if !sc.step(t[i]) {
			return false
		}
	}
	return sc.done()
}

func TestJSONScannerAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range jsonSamples {
		if got, want := scanWhole(s), json.Valid([]byte(s)); got != want {
			t.Errorf("%q: scanner %v, encoding/json %v", s, got, want)
		}
	}
}

// jsonSamples are containers, valid and not; a bare scalar is out of the
// scanner's scope (the tool formats' values are objects).
var jsonSamples = []string{
	`{}`, `[]`, ` { } `, `{"a":1}`, `{"a":-0.5e+10,"b":[true,false,null]}`,
	`{"s":"\"\\\/\b\f\n\r\t\u00e9\uD83D\uDE00"}`, `[1,2,[3,[4]],{"x":{}}]`,
	`{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":-}`, `{"a":1e}`, `{"a":1e+}`, `[1,]`,
	`{"a":1,}`, `{,}`, `{"a"}`, `{"a":}`, `{a:1}`, `["\x"]`, `["\u12g4"]`, "[\"a\nb\"]",
	`[tru]`, `[nul]`, `[truee]`, `{"a":1}}`, `[1 2]`, `{"a":1 "b":2}`, `[}`, `{]`,
	`{"a":[1,2}`, `[0]`, `[-0]`, `[0.0e0]`, `[1E5]`, `["é"]`, `{"a":"b"`,
	strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth),
}

// Deeper nesting than maxJSONDepth is refused, not scanned.
func TestJSONScannerBoundsDepth(t *testing.T) {
	if scanWhole(strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1)) {
		t.Fatal("nesting beyond maxJSONDepth accepted")
	}
}

func FuzzJSONScanner(f *testing.F) {
	for _, s := range jsonSamples {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		t2 := strings.TrimSpace(s)
		if !strings.HasPrefix(t2, "{") && !strings.HasPrefix(t2, "[") {
			return
		}
		if strings.Count(s, "[")+strings.Count(s, "{") > maxJSONDepth {
			return
		}
		if got, want := scanWhole(s), json.Valid([]byte(s)); got != want {
			t.Fatalf("%q: scanner %v, encoding/json %v", s, got, want)
		}
	})
}

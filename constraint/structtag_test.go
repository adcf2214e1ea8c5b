package constraint

import (
	"strings"
	"testing"
)

// sglangTag is a structural tag in the shape SGLang's structured-outputs
// docs show for function calls.
const sglangTag = `{
  "type": "structural_tag",
  "structures": [
    {"begin": "<function=get_current_weather>",
     "schema": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]},
     "end": "</function>"},
    {"begin": "<function=get_current_date>",
     "schema": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
     "end": "</function>"}
  ],
  "triggers": ["<function="]
}`

// xgrammarTag is the newer format form from xgrammar's structural tag docs.
const xgrammarTag = `{
  "type": "structural_tag",
  "format": {
    "type": "sequence",
    "elements": [
      {"type": "tag", "begin": "<think>", "content": {"type": "any_text"}, "end": "</think>"},
      {"type": "triggered_tags", "triggers": ["<function="], "tags": [
        {"type": "tag", "begin": "<function=get_weather>",
         "content": {"type": "json_schema", "json_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
         "end": "</function>"}
      ], "at_least_one": false, "stop_after_first": false}
    ]
  }
}`

func TestCheckStructuralTagAccepts(t *testing.T) {
	for _, tc := range []struct{ name, tag string }{
		{"SGLang structures and triggers", sglangTag},
		{"xgrammar format", xgrammarTag},
		{"SGLang extra fields ignored", `{"type":"structural_tag","max_new_tokens":2048,"structures":[{"begin":"<a>","schema":{},"end":"</a>"}],"triggers":["<a"]}`},
		{"SGLang schema with $defs", `{"type":"structural_tag","structures":[{"begin":"<t>","schema":{"$defs":{"x":{"type":"string"}},"$ref":"#/$defs/x"},"end":"</t>"}],"triggers":["<t>"]}`},
		{"format const_string", `{"type":"structural_tag","format":{"type":"const_string","value":"ok"}}`},
		{"format grammar and regex", `{"type":"structural_tag","format":{"type":"or","elements":[{"type":"grammar","grammar":"root ::= \"yes\" | \"no\""},{"type":"regex","pattern":"[A-Z]{3}-[0-9]{4}"}]}}`},
		{"format repeat and dispatch", `{"type":"structural_tag","format":{"type":"repeat","min":1,"max":-1,"content":{"type":"dispatch","rules":[["<f>",{"type":"json_schema","json_schema":{"type":"object"}}]],"loop":true}}}`},
		{"format type unknown to this check", `{"type":"structural_tag","format":{"type":"token_dispatch","rules":[[1,{"type":"any_text"}]]}}`},
		{"tags_with_separator", `{"type":"structural_tag","format":{"type":"tags_with_separator","separator":",","tags":[{"type":"tag","begin":"<i>","content":{"type":"json_schema","json_schema":{}},"end":"</i>"}]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckStructuralTag(tc.tag, Limits{}); err != nil {
				t.Fatalf("CheckStructuralTag refused a valid tag: %v", err)
			}
		})
	}
}

func TestCheckStructuralTagRejects(t *testing.T) {
	for _, tc := range []struct{ name, tag, want string }{
		{"not JSON", `{"type":`, "invalid JSON at line 1, column 9"},
		{"an array", `[]`, "at the root: a structural tag must be an object"},
		{"wrong type", `{"type":"json_schema","structures":[],"triggers":["<"]}`, `at /type: want "structural_tag"`},
		{"neither form", `{"type":"structural_tag"}`, `want "format" (xgrammar) or "structures" and "triggers" (SGLang)`},
		{"no triggers", `{"type":"structural_tag","structures":[]}`, "at /triggers: want a non-empty array of strings"},
		{"empty trigger", `{"type":"structural_tag","structures":[],"triggers":[""]}`, `at /triggers/0: want a non-empty string`},
		{"structures not an array", `{"type":"structural_tag","structures":{},"triggers":["<"]}`, "at /structures: want an array, not an object"},
		{"begin not started by a trigger", `{"type":"structural_tag","structures":[{"begin":"<a>","schema":{},"end":"</a>"},{"begin":"[tool]","schema":{},"end":"[/tool]"}],"triggers":["<"]}`, `at /structures/1/begin: "[tool]" does not start with any trigger`},
		{"missing end", `{"type":"structural_tag","structures":[{"begin":"<a>","schema":{}}],"triggers":["<"]}`, "at /structures/0/end: want a string"},
		{"missing schema", `{"type":"structural_tag","structures":[{"begin":"<a>","end":"</a>"}],"triggers":["<"]}`, "at /structures/0: a structure needs a schema"},
		{"bad schema", strings.Replace(sglangTag, `"type": "string", "enum"`, `"type": "strng", "enum"`, 1), `at /structures/0/schema/properties/unit/type: "strng" is not a JSON Schema type`},
		{"format not an object", `{"type":"structural_tag","format":"tag"}`, "at /format: a format must be an object, not a string"},
		{"format without type", `{"type":"structural_tag","format":{}}`, "at /format: a format needs a string type"},
		{"bad nested schema", strings.Replace(xgrammarTag, `{"city": {"type": "string"}}`, `{"city": {"type": "text"}}`, 1), `at /format/elements/1/tags/0/content/json_schema/properties/city/type: "text"`},
		{"bad grammar", `{"type":"structural_tag","format":{"type":"grammar","grammar":"root ::= x"}}`, `at /format/grammar: grammar line 1, column 10: rule "x" is not defined`},
		{"bad regex", `{"type":"structural_tag","format":{"type":"regex","pattern":"(?<=a)b"}}`, "at /format/pattern: invalid regular expression: lookbehind"},
		{"empty sequence", `{"type":"structural_tag","format":{"type":"sequence","elements":[]}}`, "at /format/elements: sequence needs a non-empty array elements"},
		{"tag without content", `{"type":"structural_tag","format":{"type":"tag","begin":"<a>","end":"</a>"}}`, "at /format: tag needs content"},
		{"bad dispatch rule", `{"type":"structural_tag","format":{"type":"dispatch","rules":[["<a>"]]}}`, "at /format/rules/0: a dispatch rule is [pattern string, format]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckStructuralTag(tc.tag, Limits{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckStructuralTag = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func hostileStructuralTags() []hostileDoc {
	structures := make([]string, 5000)
	for i := range structures {
		structures[i] = `{"begin":"<f` + itoa(i) + `>","schema":{"type":"object"},"end":"</f>"}`
	}
	return []hostileDoc{
		{name: "1 MB of nested formats", doc: `{"type":"structural_tag","format":` + strings.Repeat(`{"type":"optional","content":`, 1<<20/30) + `{}` + strings.Repeat("}", 1<<20/30) + `}`},
		{name: "5000 structures", doc: `{"type":"structural_tag","structures":[` + strings.Join(structures, ",") + `],"triggers":["<f"]}`},
		{name: "1 MB of [", doc: strings.Repeat("[", 1<<20)},
	}
}

func TestCheckStructuralTagHostile(t *testing.T) {
	for _, h := range hostileStructuralTags() {
		t.Run(h.name, func(t *testing.T) {
			err := CheckStructuralTag(h.doc, Limits{MaxBytes: 4 << 20})
			t.Logf("%d bytes: %v", len(h.doc), err)
			if h.accept != (err == nil) {
				t.Fatalf("accept = %v, want %v", err == nil, h.accept)
			}
		})
	}
}

func BenchmarkCheckStructuralTag(b *testing.B) {
	docs := append([]hostileDoc{{name: "SGLang", doc: sglangTag}, {name: "xgrammar", doc: xgrammarTag}}, hostileStructuralTags()...)
	for _, d := range docs {
		b.Run(d.name, func(b *testing.B) {
			lim := Limits{MaxBytes: 4 << 20}
			b.SetBytes(int64(len(d.doc)))
			b.ReportAllocs()
			for b.Loop() {
				_ = CheckStructuralTag(d.doc, lim)
			}
		})
	}
}

func FuzzCheckStructuralTag(f *testing.F) {
	for _, s := range []string{sglangTag, xgrammarTag, `{"type":"structural_tag","format":{"type":"grammar","grammar":"root ::= \"a\""}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_ = CheckStructuralTag(s, Limits{})
	})
}

package constraint

import (
	"encoding/json"
	"strings"
	"testing"
)

// A schema as Pydantic v2 emits it for a model with a nested model, an
// optional field (anyOf with null), an enum and a list.
const pydanticSchema = `{
  "$defs": {
    "Unit": {"enum": ["celsius", "fahrenheit"], "title": "Unit", "type": "string"},
    "Location": {
      "properties": {
        "city": {"title": "City", "type": "string"},
        "country": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null, "title": "Country"}
      },
      "required": ["city"], "title": "Location", "type": "object"
    }
  },
  "properties": {
    "location": {"$ref": "#/$defs/Location"},
    "unit": {"$ref": "#/$defs/Unit", "default": "celsius"},
    "days": {"default": 1, "maximum": 14, "minimum": 1, "title": "Days", "type": "integer"},
    "tags": {"items": {"type": "string", "maxLength": 32}, "maxItems": 5, "title": "Tags", "type": "array"}
  },
  "required": ["location"], "title": "WeatherQuery", "type": "object"
}`

// A schema as OpenAI's strict mode wants it: every property required,
// additionalProperties false.
const openAIStrictSchema = `{
  "type": "object",
  "properties": {
    "name": {"type": "string", "pattern": "^[A-Z][a-z]+$"},
    "email": {"type": "string", "format": "email"},
    "birthday": {"type": ["string", "null"], "pattern": "^\\d{4}-\\d{2}-\\d{2}$"}
  },
  "required": ["name", "email", "birthday"],
  "additionalProperties": false
}`

func TestCheckJSONSchemaAccepts(t *testing.T) {
	for _, tc := range []struct{ name, schema string }{
		{"pydantic with $defs and $ref", pydanticSchema},
		{"OpenAI strict", openAIStrictSchema},
		{"true schema", `true`},
		{"false schema", `false`},
		{"empty schema", `{}`},
		{"white space around", " \n{\"type\": \"object\"}\t\n"},
		{"draft-07 definitions", `{"definitions": {"a": {"type": "integer"}}, "properties": {"x": {"$ref": "#/definitions/a"}}}`},
		{"draft-07 tuple items", `{"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": false}`},
		{"prefixItems", `{"type": "array", "prefixItems": [{"type": "string"}], "items": false}`},
		{"recursive tree via $ref cycle", `{"$defs": {"node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}, "$ref": "#/$defs/node"}`},
		{"mutual $ref cycle", `{"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}`},
		{"root reference", `{"type": "object", "properties": {"next": {"$ref": "#"}}}`},
		{"pointer escapes ~0 ~1", `{"$defs": {"a/b": {"type": "string"}, "c~d": {"type": "integer"}}, "anyOf": [{"$ref": "#/$defs/a~1b"}, {"$ref": "#/$defs/c~0d"}]}`},
		{"percent-escaped pointer", `{"$defs": {"a b": {"type": "string"}}, "$ref": "#/$defs/a%20b"}`},
		{"reference outside schema keywords", `{"components": {"schemas": {"Pet": {"type": "object"}}}, "$ref": "#/components/schemas/Pet"}`},
		{"enum of mixed values", `{"enum": ["a", 1, null, true, {"x": 1}]}`},
		{"const", `{"const": "fixed"}`},
		{"oneOf allOf not", `{"oneOf": [{"type": "string"}, {"type": "number"}], "allOf": [{}], "not": {"type": "null"}}`},
		{"type array", `{"type": ["string", "null"]}`},
		{"integer given as 3.0", `{"type": "string", "minLength": 3.0}`},
		{"draft-04 exclusiveMinimum boolean", `{"type": "number", "minimum": 0, "exclusiveMinimum": true}`},
		{"min equals max", `{"type": "string", "minLength": 2, "maxLength": 2}`},
		{"patternProperties", `{"type": "object", "patternProperties": {"^x-[a-z]+$": {"type": "string"}}}`},
		{"dependencies both forms", `{"dependencies": {"a": ["b"], "c": {"required": ["d"]}}}`},
		{"unknown keywords ignored", `{"type": "object", "x-vendor": {"$ref": 17}, "description": 5, "discriminator": {"propertyName": "kind"}}`},
		{"duplicate key keeps the last", `{"type": "strin", "type": "string"}`},
		{"unicode property name", `{"properties": {"città": {"type": "string"}}}`},
		{"large repeat in pattern", `{"type": "string", "pattern": "^[a-z]{1,5000}$"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckJSONSchema(tc.schema, Limits{}); err != nil {
				t.Fatalf("CheckJSONSchema refused a valid schema: %v", err)
			}
		})
	}
}

func TestCheckJSONSchemaRejects(t *testing.T) {
	for _, tc := range []struct{ name, schema, want string }{
		{"misspelt type", `{"properties": {"city": {"type": "strin"}}}`, `at /properties/city/type: "strin" is not a JSON Schema type`},
		{"type array with unknown name", `{"type": ["string", "nil"]}`, `at /type/1: "nil" is not a JSON Schema type`},
		{"type a number", `{"type": 3}`, `at /type: type must be a type name or an array of them, not a number`},
		{"array schema", `[{"type": "string"}]`, `at the root: a schema must be an object or a boolean, not an array`},
		{"string schema", `"object"`, `at the root: a schema must be an object or a boolean`},
		{"properties an array", `{"properties": [{"type": "string"}]}`, `at /properties: properties must be an object of schemas, not an array`},
		{"property schema a string", `{"properties": {"a": "string"}}`, `at /properties/a: a schema must be an object or a boolean, not a string`},
		{"required not an array", `{"required": "name"}`, `at /required: want an array of strings, not a string`},
		{"required with a number", `{"required": ["a", 2]}`, `at /required/1: want a string, not 2`},
		{"enum not an array", `{"enum": "a"}`, `at /enum: enum must be an array`},
		{"empty anyOf", `{"anyOf": []}`, `at /anyOf: anyOf must not be empty`},
		{"oneOf an object", `{"oneOf": {"type": "string"}}`, `at /oneOf: oneOf must be an array of schemas, not an object`},
		{"allOf member invalid", `{"allOf": [{"type": "string"}, 7]}`, `at /allOf/1: a schema must be an object or a boolean, not a number`},
		{"negative minLength", `{"minLength": -1}`, `at /minLength: minLength must be a non-negative integer, not -1`},
		{"fractional maxItems", `{"maxItems": 2.5}`, `at /maxItems: maxItems must be a non-negative integer, not 2.5`},
		{"minimum a string", `{"minimum": "0"}`, `at /minimum: minimum must be a number, not "0"`},
		{"multipleOf zero", `{"multipleOf": 0}`, `at /multipleOf: multipleOf must be a number greater than 0`},
		{"min above max", `{"properties": {"n": {"minimum": 10, "maximum": 1}}}`, `at /properties/n: minimum 10 is greater than maximum 1`},
		{"minLength above maxLength", `{"minLength": 5, "maxLength": 4}`, `minLength 5 is greater than maxLength 4`},
		{"invalid pattern", `{"properties": {"zip": {"type": "string", "pattern": "[0-9"}}}`, `at /properties/zip/pattern: invalid regular expression: missing closing ]`},
		{"lookahead pattern", `{"pattern": "^(?=.*[A-Z]).+$"}`, `at /pattern: invalid regular expression: lookahead`},
		// Pydantic 2.12 emits this for a Decimal field; xgrammar's regex
		// converter refuses the lookahead, so the router says where it is.
		{"Pydantic Decimal pattern", `{"properties": {"price": {"anyOf": [{"type": "number"}, {"type": "string", "pattern": "^(?!^[-+.]*$)[+-]?0*\\d*\\.?\\d*$"}]}}}`, `at /properties/price/anyOf/1/pattern: invalid regular expression: lookahead "(?!"`},
		{"invalid patternProperties key", `{"patternProperties": {"(": {}}}`, `at /patternProperties: property pattern "("`},
		{"additionalProperties a string", `{"additionalProperties": "no"}`, `at /additionalProperties: a schema must be an object or a boolean`},
		{"items a number", `{"items": 1}`, `at /items: a schema must be`},
		{"unresolvable $ref", `{"properties": {"a": {"$ref": "#/$defs/Missing"}}, "$defs": {}}`, `at /properties/a/$ref: $ref "#/$defs/Missing" does not resolve: /$defs has no member "Missing"`},
		{"remote $ref", `{"$ref": "https://example.com/s.json"}`, `is not a local reference`},
		{"anchor $ref", `{"$ref": "#foo"}`, `is not a JSON pointer`},
		{"$ref to a string", `{"title": "x", "$ref": "#/title"}`, `resolves to a string, not a schema`},
		{"$ref not a string", `{"$ref": 1}`, `at /$ref: $ref must be a string`},
		{"escaped key in pointer", `{"properties": {"a/b": {"type": 1}}}`, `at /properties/a~1b/type:`},
		{"nested in $defs", `{"$defs": {"X": {"properties": {"y": {"type": "bool"}}}}}`, `at /$defs/X/properties/y/type: "bool"`},
		{"invalid JSON", `{"type": "object",}`, `invalid JSON at line 1, column 19`},
		{"trailing text", `{} {}`, `invalid JSON at line 1, column 4: unexpected '{' after the JSON value`},
		{"empty input", ``, `unexpected end of input`},
		{"unterminated string", `{"type": "obj`, `unterminated string`},
		{"bad escape", `{"type": "\q"}`, `invalid escape`},
		{"leading zero", `{"minimum": 01}`, `invalid JSON`},
		{"control character in string", "{\"title\": \"a\tb\"}", `control character`},
		{"invalid UTF-8", "{\"title\": \"\xff\"}", `invalid UTF-8`},
		{"line and column on line 3", "{\n  \"type\": \"object\",\n  \"properties\" {}\n}", `line 3, column 16`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckJSONSchema(tc.schema, Limits{})
			if err == nil {
				t.Fatalf("CheckJSONSchema accepted %s", tc.schema)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

type hostileDoc struct {
	name, doc string
	accept    bool // a valid schema within the bounds
}

// hostileJSON returns documents built to make a checker recurse, allocate or
// loop without bound. They are checked with a 4 MiB size bound so that the
// depth and node bounds, not the size bound, are what stops them.
func hostileJSON() []hostileDoc {
	props := make([]string, 100000)
	for i := range props {
		props[i] = `"p` + itoa(i) + `":{"type":"string"}`
	}
	defs := make([]string, 2000)
	for i := range defs {
		defs[i] = `"d` + itoa(i) + `":{"$ref":"#/$defs/d` + itoa((i+1)%len(defs)) + `"}`
	}
	// Each level's $defs holds the next, and every level refers to the root,
	// to its own parent and to the innermost level.
	var nested strings.Builder
	inner := "#" + strings.Repeat("/$defs/a", 30)
	for i := 0; i < 30; i++ {
		nested.WriteString(`{"anyOf":[{"$ref":"#"},{"$ref":"` + inner + `"},{"$ref":"#` + strings.Repeat("/$defs/a", max(i-1, 0)) + `"}],"$defs":{"a":`)
	}
	nested.WriteString(`{"$ref":"#"}` + strings.Repeat("}}", 30))
	return []hostileDoc{
		{name: "30 nested $defs referring up, down and to the root", doc: nested.String(), accept: true},
		{name: "1 MB of [", doc: strings.Repeat("[", 1<<20)},
		{name: `1 MB of {"a":`, doc: strings.Repeat(`{"a":`, 1<<20/5)},
		{name: "100k properties", doc: `{"type":"object","properties":{` + strings.Join(props, ",") + `}}`},
		{name: "2000-long $ref cycle", doc: `{"$defs":{` + strings.Join(defs, ",") + `},"$ref":"#/$defs/d0"}`, accept: true},
		{name: "deep allOf nesting", doc: strings.Repeat(`{"allOf":[`, 5000) + strings.Repeat(`]}`, 5000)},
		{name: "deep not nesting", doc: strings.Repeat(`{"not":`, 10000) + `{}` + strings.Repeat(`}`, 10000)},
		{name: "1 MB string", doc: `{"title":"` + strings.Repeat("x", 1<<20) + `"}`, accept: true},
		{name: "3000 $refs to one def", doc: `{"$defs":{"a":{"type":"string"}},"anyOf":[` + strings.TrimSuffix(strings.Repeat(`{"$ref":"#/$defs/a"},`, 3000), ",") + `]}`, accept: true},
		{name: "1000 duplicate keys", doc: `{` + strings.TrimSuffix(strings.Repeat(`"type":"string",`, 1000), ",") + `}`, accept: true},
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// TestCheckJSONSchemaHostile: every hostile document returns (a bound error
// or an acceptance), with no stack overflow; how fast is the benchmark's job.
func TestCheckJSONSchemaHostile(t *testing.T) {
	for _, h := range hostileJSON() {
		t.Run(h.name, func(t *testing.T) {
			err := CheckJSONSchema(h.doc, Limits{MaxBytes: 4 << 20})
			t.Logf("%d bytes: %v", len(h.doc), err)
			if h.accept && err != nil {
				t.Fatalf("refused a valid schema: %v", err)
			}
			if !h.accept && err == nil {
				t.Fatalf("accepted a document over the bounds")
			}
		})
	}
	// With the default limits the size bound stops the megabyte inputs first.
	if err := CheckJSONSchema(strings.Repeat("[", 1<<20), Limits{}); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("1 MB of [ with default limits: %v", err)
	}
}

func TestCheckJSONSchemaLimits(t *testing.T) {
	for _, tc := range []struct {
		name, schema string
		lim          Limits
		want         string
	}{
		{"default size bound", `{"title":"` + strings.Repeat("x", DefaultMaxBytes) + `"}`, Limits{}, "over the limit of 262144"},
		{"custom size bound", `{"type":"string"}`, Limits{MaxBytes: 10}, "17 bytes, over the limit of 10"},
		{"depth bound", `{"not":{"not":{"not":{}}}}`, Limits{MaxDepth: 3}, "nesting deeper than 3"},
		{"node bound", `{"enum":[1,2,3,4,5]}`, Limits{MaxNodes: 4}, "more than 4 values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckJSONSchema(tc.schema, tc.lim)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// Exactly at the bounds is accepted.
	if err := CheckJSONSchema(`{"not":{"not":{}}}`, Limits{MaxDepth: 3}); err != nil {
		t.Fatalf("depth 3 with MaxDepth 3: %v", err)
	}
	if err := CheckJSONSchema(`{"enum":[1,2]}`, Limits{MaxNodes: 4}); err != nil {
		t.Fatalf("4 values with MaxNodes 4: %v", err)
	}
}

func BenchmarkCheckJSONSchema(b *testing.B) {
	docs := append([]hostileDoc{{name: "pydantic", doc: pydanticSchema}}, hostileJSON()...)
	for _, d := range docs {
		b.Run(d.name, func(b *testing.B) {
			lim := Limits{MaxBytes: 4 << 20}
			b.SetBytes(int64(len(d.doc)))
			b.ReportAllocs()
			for b.Loop() {
				_ = CheckJSONSchema(d.doc, lim)
			}
		})
	}
}

func FuzzCheckJSONSchema(f *testing.F) {
	for _, s := range []string{pydanticSchema, openAIStrictSchema, `true`, `{"$ref":"#"}`, `{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, `[[[`, `{"pattern":"(?=a)"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckJSONSchema(s, Limits{}) != nil {
			return
		}
		if !json.Valid([]byte(s)) {
			t.Fatalf("accepted text that is not valid JSON: %q", s)
		}
		// An accepted schema used as a tool's parameters gives a required-tool
		// schema that checks too: every rewritten reference still resolves.
		// The wrapper adds a few levels and values, hence the looser limits.
		combined, err := RequiredToolSchema([]Tool{{Name: "f", Parameters: []byte(s)}})
		if err != nil {
			t.Fatalf("RequiredToolSchema refused an accepted schema %q: %v", s, err)
		}
		if err := CheckJSONSchema(combined, Limits{MaxDepth: DefaultMaxDepth + 8, MaxNodes: DefaultMaxNodes + 64, MaxBytes: 2 * DefaultMaxBytes}); err != nil {
			t.Fatalf("combined schema for %q does not check: %v\n%s", s, err, combined)
		}
	})
}

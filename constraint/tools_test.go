package constraint

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

var weatherTools = []Tool{
	{Name: "get_weather", Parameters: []byte(`{
		"type": "object",
		"properties": {
			"location": {"$ref": "#/$defs/Location"},
			"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
		},
		"required": ["location"],
		"$defs": {"Location": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
	}`)},
	// A second tool with a $defs entry of the same name and another shape:
	// vLLM refuses this pair; the rewritten references keep them apart.
	{Name: "get_time", Parameters: []byte(`{
		"type": "object",
		"properties": {"where": {"$ref": "#/$defs/Location"}},
		"$defs": {"Location": {"type": "string"}}
	}`)},
	{Name: "ping"}, // no parameters
}

func TestRequiredToolSchema(t *testing.T) {
	schema, err := RequiredToolSchema(weatherTools)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckJSONSchema(schema, Limits{}); err != nil {
		t.Fatalf("RequiredToolSchema's output fails CheckJSONSchema: %v\n%s", err, schema)
	}
	for _, want := range []string{
		`{"type":"array","minItems":1,"items":{"type":"object","anyOf":[`,
		`"name":{"type":"string","enum":["get_weather"]}`,
		`"$ref":"#/items/anyOf/0/properties/parameters/$defs/Location"`,
		`"$ref":"#/items/anyOf/1/properties/parameters/$defs/Location"`,
		`"parameters":{"type":"object"}`,
		`"required":["name","parameters"]`,
	} {
		if !strings.Contains(schema, want) {
			t.Errorf("schema lacks %s:\n%s", want, schema)
		}
	}

	// Round trip: documents valid under the schema parse into their calls.
	for _, tc := range []struct {
		answer string
		want   []ToolCall
	}{
		{
			`[{"name": "get_weather", "parameters": {"location": {"city": "Paris"}, "unit": "celsius"}}]`,
			[]ToolCall{{"get_weather", `{"location":{"city":"Paris"},"unit":"celsius"}`}},
		},
		{
			`[{"name":"get_time","parameters":{"where":"Tokyo"}}, {"name":"ping","parameters":{}}, {"name":"get_weather","parameters":{"location":{"city":"Oslo"}}}]`,
			[]ToolCall{{"get_time", `{"where":"Tokyo"}`}, {"ping", `{}`}, {"get_weather", `{"location":{"city":"Oslo"}}`}},
		},
	} {
		if err := validate(t, schema, tc.answer); err != "" {
			t.Fatalf("test answer is not valid under the schema: %s\n%s", err, tc.answer)
		}
		got, err := ParseRequiredToolOutput(tc.answer)
		if err != nil {
			t.Fatalf("ParseRequiredToolOutput(%s): %v", tc.answer, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Fatalf("ParseRequiredToolOutput(%s) = %+v, want %+v", tc.answer, got, tc.want)
		}
	}
	// And the schema refuses what the tools do not allow, so the validator
	// used above is not vacuous.
	for _, bad := range []string{
		`[]`,
		`[{"name":"get_wether","parameters":{}}]`,
		`[{"name":"get_time","parameters":{"where":{"city":"Tokyo"}}}]`,
		`[{"name":"get_weather","parameters":{"location":{}}}]`,
		`{"name":"ping","parameters":{}}`,
	} {
		if validate(t, schema, bad) == "" {
			t.Errorf("validator accepted %s", bad)
		}
	}
}

func TestRequiredToolSchemaErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tools []Tool
		want  string
	}{
		{"no tools", nil, `tool_choice "required" needs at least one tool`},
		{"nameless tool", []Tool{{Name: ""}}, "tool 0 has no name"},
		{"name not UTF-8", []Tool{{Name: "a"}, {Name: "\xff"}}, "tool 1's name is not valid UTF-8"},
		{"duplicate names", []Tool{{Name: "a"}, {Name: "a"}}, `tool "a" is declared twice`},
		{"bad parameters", []Tool{{Name: "a", Parameters: []byte(`{"type":"obj"}`)}}, `parameters of tool "a": at /type: "obj" is not a JSON Schema type`},
		{"parameters not JSON", []Tool{{Name: "a", Parameters: []byte(`{`)}}, `parameters of tool "a": invalid JSON`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RequiredToolSchema(tc.tools)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("RequiredToolSchema = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestNamedToolSchema(t *testing.T) {
	got, err := NamedToolSchema(weatherTools, "get_time")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"object","properties":{"where":{"$ref":"#/$defs/Location"}},"$defs":{"Location":{"type":"string"}}}`
	if got != want {
		t.Fatalf("NamedToolSchema = %s, want %s", got, want)
	}
	if got, _ := NamedToolSchema(weatherTools, "ping"); got != `{"type":"object"}` {
		t.Fatalf("tool without parameters: %s", got)
	}
	_, err = NamedToolSchema(weatherTools, "get_wether")
	if err == nil || !strings.Contains(err.Error(), `tool_choice names "get_wether", which is not a declared tool (declared: "get_time", "get_weather", "ping")`) {
		t.Fatalf("unknown name: %v", err)
	}
	if _, err := NamedToolSchema(nil, "x"); err == nil || !strings.Contains(err.Error(), "declares no tools") {
		t.Fatalf("no tools: %v", err)
	}
}

func TestParseRequiredToolOutputErrors(t *testing.T) {
	for _, tc := range []struct{ answer, want string }{
		{``, "want a JSON array"},
		{`{"name":"a","parameters":{}}`, "want a JSON array"},
		{`[]`, "the array is empty"},
		{`null`, "the array is empty"},
		{`[1]`, "want a JSON array"},
		{`[{"parameters":{}}]`, "tool call 0: want a string name"},
		{`[{"name":null,"parameters":{}}]`, "tool call 0: want a string name"},
		{`[{"name":"a"}]`, "tool call 0 (a): want an object of parameters"},
		{`[{"name":"a","parameters":[1]}]`, "tool call 0 (a): want an object of parameters"},
		{`[{"name":"a","parameters":{}}] trailing`, "unexpected text after the JSON array"},
	} {
		_, err := ParseRequiredToolOutput(tc.answer)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRequiredToolOutput(%q) = %v, want %q", tc.answer, err, tc.want)
		}
	}
}

// validate is a small JSON Schema validator for the keywords the tool schemas
// use (type, properties, required, enum, anyOf, items, minItems, $ref), so
// the round trip is checked against the schema rather than assumed. It
// returns "" when doc is valid.
func validate(t *testing.T, schema, doc string) string {
	t.Helper()
	root, err := parseJSON(schema, Limits{}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	var d any
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		t.Fatal(err)
	}
	c := &schemaChecker{root: root}
	var check func(s *jval, d any, depth int) string
	check = func(s *jval, d any, depth int) string {
		if depth > 50 {
			return "too deep"
		}
		if s.kind == jBool {
			if !s.b {
				return "false schema"
			}
			return ""
		}
		if r := s.get("$ref"); r != nil {
			target, _, err := c.resolve(r.str)
			if err != nil {
				return err.Error()
			}
			if e := check(target, d, depth+1); e != "" {
				return e
			}
		}
		if ty := s.get("type"); ty != nil {
			ok := false
			switch d.(type) {
			case map[string]any:
				ok = ty.str == "object"
			case []any:
				ok = ty.str == "array"
			case string:
				ok = ty.str == "string"
			}
			if !ok {
				return "want type " + ty.str
			}
		}
		if e := s.get("enum"); e != nil {
			found := false
			for _, v := range e.arr {
				if v.kind == jString && v.str == d {
					found = true
				}
			}
			if !found {
				return "not in enum"
			}
		}
		if obj, isObj := d.(map[string]any); isObj {
			if req := s.get("required"); req != nil {
				for _, r := range req.arr {
					if _, ok := obj[r.str]; !ok {
						return "missing " + r.str
					}
				}
			}
			if props := s.get("properties"); props != nil {
				for _, m := range props.obj {
					if v, ok := obj[m.key]; ok {
						if e := check(m.val, v, depth+1); e != "" {
							return m.key + ": " + e
						}
					}
				}
			}
		}
		if arr, isArr := d.([]any); isArr {
			if mi := s.get("minItems"); mi != nil && float64(len(arr)) < mi.num() {
				return "too few items"
			}
			if items := s.get("items"); items != nil {
				for _, el := range arr {
					if e := check(items, el, depth+1); e != "" {
						return e
					}
				}
			}
		}
		if alts := s.get("anyOf"); alts != nil {
			for _, alt := range alts.arr {
				if check(alt, d, depth+1) == "" {
					return ""
				}
			}
			return "no anyOf alternative matches"
		}
		return ""
	}
	return check(root, d, 0)
}

// Only references in schema positions move: a property named "default" or
// "enum" is a schema, while the value of a const or an enum is data that
// merely looks like a reference.
func TestRequiredToolSchemaRewritesOnlySchemaRefs(t *testing.T) {
	schema, err := RequiredToolSchema([]Tool{{Name: "set", Parameters: []byte(`{
		"type": "object",
		"properties": {
			"default": {"$ref": "#/$defs/V"},
			"enum": {"$ref": "#/$defs/V"},
			"marker": {"const": {"$ref": "#/not/a/reference"}},
			"choice": {"enum": [{"$ref": "#/data"}]},
			"self": {"$ref": "#"}
		},
		"$defs": {"V": {"type": "integer"}}
	}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckJSONSchema(schema, Limits{}); err != nil {
		t.Fatalf("combined schema does not check: %v\n%s", err, schema)
	}
	for _, want := range []string{
		`"default":{"$ref":"#/items/anyOf/0/properties/parameters/$defs/V"}`,
		`"enum":{"$ref":"#/items/anyOf/0/properties/parameters/$defs/V"}`,
		`"marker":{"const":{"$ref":"#/not/a/reference"}}`,
		`"choice":{"enum":[{"$ref":"#/data"}]}`,
		`"self":{"$ref":"#/items/anyOf/0/properties/parameters"}`,
	} {
		if !strings.Contains(schema, want) {
			t.Errorf("schema lacks %s:\n%s", want, schema)
		}
	}
}

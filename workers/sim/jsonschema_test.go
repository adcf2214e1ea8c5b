package sim

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestSchemaInstance(t *testing.T) {
	cases := []struct{ name, schema, want string }{
		{"empty schema", `{}`, `{}`},
		{"true", `true`, `{}`},
		{"object with required", `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"},"c":{"type":"boolean"}},"required":["b","a"]}`, `{"a":"","b":0}`},
		{"required without properties", `{"type":"object","required":["x"]}`, `{"x":{}}`},
		{"additionalProperties schema", `{"type":"object","required":["x"],"additionalProperties":{"type":"null"}}`, `{"x":null}`},
		{"minProperties", `{"type":"object","properties":{"b":{"type":"null"},"a":{"type":"boolean"}},"minProperties":1}`, `{"a":false}`},
		{"array minItems", `{"type":"array","items":{"type":"number","minimum":2.5},"minItems":3}`, `[2.5,2.5,2.5]`},
		{"array prefixItems", `{"type":"array","prefixItems":[{"const":"x"}],"items":{"type":"null"},"minItems":2}`, `["x",null]`},
		{"empty array", `{"type":"array"}`, `[]`},
		{"string minLength", `{"type":"string","minLength":3,"maxLength":5}`, `"aaa"`},
		{"string enum", `{"type":"string","enum":["red","green"]}`, `"red"`},
		{"string pattern with const", `{"type":"string","pattern":"^z+$","const":"zz"}`, `"zz"`},
		{"string format", `{"type":"string","format":"date-time"}`, `"2000-01-01T00:00:00Z"`},
		{"integer minimum", `{"type":"integer","minimum":3.5}`, `4`},
		{"integer exclusiveMinimum", `{"type":"integer","exclusiveMinimum":3}`, `4`},
		{"number exclusiveMinimum", `{"type":"number","exclusiveMinimum":0.5}`, `1.5`},
		{"integer multipleOf", `{"type":"integer","minimum":7,"multipleOf":5}`, `10`},
		{"negative maximum", `{"type":"integer","maximum":-3}`, `-4`},
		{"number range", `{"type":"number","minimum":-2,"maximum":-1}`, `-2`},
		{"boolean", `{"type":"boolean"}`, `false`},
		{"null", `{"type":"null"}`, `null`},
		{"type list", `{"type":["string","null"]}`, `""`},
		{"type list skips the impossible", `{"type":["string","integer"],"pattern":"x+"}`, `0`},
		{"enum of mixed", `{"enum":[{"k":1},2]}`, `{"k":1}`},
		{"const", `{"const":[1,"a",null]}`, `[1,"a",null]`},
		{"anyOf first", `{"anyOf":[{"type":"integer","minimum":1},{"type":"string"}]}`, `1`},
		{"oneOf first with siblings", `{"type":"object","required":["a"],"properties":{"a":{"type":"integer"}},"oneOf":[{"required":["b"],"properties":{"b":{"const":true}}}]}`, `{"a":0,"b":true}`},
		{"allOf merge", `{"allOf":[{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]},{"properties":{"b":{"type":"integer","minimum":2}},"required":["b"]}]}`, `{"a":"","b":2}`},
		{"$defs ref", `{"$defs":{"pt":{"type":"object","required":["x","y"],"properties":{"x":{"type":"number"},"y":{"type":"number"}}}},"type":"object","required":["p"],"properties":{"p":{"$ref":"#/$defs/pt"}}}`, `{"p":{"x":0,"y":0}}`},
		{"definitions ref", `{"definitions":{"a/b":{"type":"integer","minimum":9}},"$ref":"#/definitions/a~1b"}`, `9`},
		{"optional recursion", `{"$defs":{"node":{"type":"object","properties":{"next":{"$ref":"#/$defs/node"}}}},"$ref":"#/$defs/node"}`, `{}`},
		{"nested arrays", `{"type":"array","minItems":2,"items":{"type":"array","minItems":1,"items":{"type":"integer"}}}`, `[[0],[0]]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := schemaInstance([]byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("instance %s, want %s", got, tc.want)
			}
		})
	}
}

func TestSchemaInstanceRefused(t *testing.T) {
	cases := []struct{ name, schema string }{
		{"not JSON", `{"type":`},
		{"trailing data", `{} {}`},
		{"false", `false`},
		{"required false property", `{"type":"object","required":["a"],"properties":{"a":false}}`},
		{"required beyond closed object", `{"type":"object","required":["a"],"additionalProperties":false}`},
		{"pattern", `{"type":"string","pattern":"^[0-9]+$"}`},
		{"maxLength below minLength", `{"type":"string","minLength":4,"maxLength":2}`},
		{"empty range", `{"type":"integer","minimum":5,"maximum":4}`},
		{"exclusive empty range", `{"type":"integer","exclusiveMinimum":1,"exclusiveMaximum":2}`},
		{"maxItems below minItems", `{"type":"array","minItems":3,"maxItems":1}`},
		{"unknown ref", `{"$ref":"#/$defs/none"}`},
		{"remote ref", `{"$ref":"https://example.com/s.json"}`},
		{"required recursion", `{"$defs":{"n":{"type":"object","required":["next"],"properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`},
		{"self ref", `{"$ref":"#"}`},
		{"exponential arrays", `{"type":"array","minItems":100,"items":{"type":"array","minItems":100,"items":{"type":"array","minItems":100}}}`},
		{"huge minLength", `{"type":"string","minLength":100000000}`},
		{"unknown type", `{"type":"tuple"}`},
		{"empty enum", `{"enum":[]}`},
		{"empty anyOf", `{"anyOf":[]}`},
		{"minProperties beyond properties", `{"type":"object","minProperties":2,"properties":{"a":{}}}`},
		{"schema not an object", `[1,2]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := schemaInstance([]byte(tc.schema))
			if !errors.Is(err, errSchema) {
				t.Errorf("instance %s, error %v; want errSchema", got, err)
			}
		})
	}
}

// FuzzSchemaInstance: any input ends quickly, without a panic, and an
// instance it returns is JSON.
func FuzzSchemaInstance(f *testing.F) {
	for _, s := range []string{
		`{}`, `true`, `false`, `{"type":"object","required":["a"],"properties":{"a":{"type":"array","minItems":2}}}`,
		`{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
		`{"allOf":[{"allOf":[{"$ref":"#"}]}]}`, `{"type":"integer","minimum":1e308,"multipleOf":1e-300}`,
		`{"type":["number"],"exclusiveMaximum":-1e308}`, `{"enum":[1e999]}`, `{"anyOf":[{"oneOf":[{"type":"string","minLength":3}]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, schema []byte) {
		start := time.Now()
		got, err := schemaInstance(schema)
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("took %v", d)
		}
		if err != nil {
			if !errors.Is(err, errSchema) {
				t.Fatalf("error %v does not wrap errSchema", err)
			}
			return
		}
		if !json.Valid(got) {
			t.Fatalf("instance %q is not JSON", got)
		}
	})
}

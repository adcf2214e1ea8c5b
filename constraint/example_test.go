package constraint_test

import (
	"fmt"

	"github.com/kvgate/kvgate/constraint"
)

func ExampleCheckJSONSchema() {
	err := constraint.CheckJSONSchema(`{"type":"object","properties":{"city":{"type":"strin"}}}`, constraint.Limits{})
	fmt.Println(err)
	// Output: at /properties/city/type: "strin" is not a JSON Schema type (want one of null, boolean, object, array, number, integer, string)
}

func ExampleCheckEBNF() {
	err := constraint.CheckEBNF("root ::= value\nvalu ::= [0-9]+", constraint.Limits{})
	fmt.Println(err)
	// Output: grammar line 1, column 10: rule "value" is not defined
}

func ExampleRequiredToolSchema() {
	schema, _ := constraint.RequiredToolSchema([]constraint.Tool{
		{Name: "get_weather", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}}}`)},
	})
	fmt.Println(schema)
	calls, _ := constraint.ParseRequiredToolOutput(`[{"name": "get_weather", "parameters": {"city": "Paris"}}]`)
	fmt.Printf("%+v\n", calls)
	// Output:
	// {"type":"array","minItems":1,"items":{"type":"object","anyOf":[{"properties":{"name":{"type":"string","enum":["get_weather"]},"parameters":{"type":"object","properties":{"city":{"type":"string"}}}},"required":["name","parameters"]}]}}
	// [{Name:get_weather Arguments:{"city":"Paris"}}]
}

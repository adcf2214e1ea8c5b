package constraint

import (
	"strings"
	"testing"
)

// TestMessagesStayShort: an error goes back to the client in a gRPC status,
// so whatever the input, the message quotes only a bounded part of it.
func TestMessagesStayShort(t *testing.T) {
	long := strings.Repeat("x", 100000)
	many := make([]Tool, 1000)
	for i := range many {
		many[i] = Tool{Name: "tool_" + itoa(i) + long[:100]}
	}
	_, namedErr := NamedToolSchema(many, long)
	_, dupErr := RequiredToolSchema([]Tool{{Name: long}, {Name: long}})
	for name, err := range map[string]error{
		"undefined long rule name":     CheckEBNF("root ::= "+long, Limits{}),
		"long rule name defined twice": CheckEBNF("root ::= \"a\"\n"+long+" ::= \"b\"\n"+long+" ::= \"c\"", Limits{}),
		"long property name":           CheckJSONSchema(`{"properties":{"`+long+`":{"type":"text"}}}`, Limits{}),
		"long $ref":                    CheckJSONSchema(`{"$ref":"#/`+long+`"}`, Limits{}),
		"long number":                  CheckJSONSchema(`{"minimum":`+strings.Repeat("9", 5000)+`,"maximum":1}`, Limits{}),
		"long unclosed regex":          CheckRegex("("+long, Limits{}),
		"long begin without trigger":   CheckStructuralTag(`{"type":"structural_tag","structures":[{"begin":"`+long+`","schema":{},"end":""}],"triggers":["<"]}`, Limits{}),
		"unknown tool among 1000":      namedErr,
		"long duplicate tool name":     dupErr,
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if n := len(err.Error()); n > 1000 {
			t.Errorf("%s: message is %d bytes: %.200s...", name, n, err)
		}
	}
}

package answer

import (
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/tokenize/template"
	"github.com/kvgate/kvgate/tokenize/textmodel"
)

// tojson renders v as a template's tojson filter prints it (transformers'
// json.dumps, key order kept).
func tojson(t *testing.T, v any) string {
	t.Helper()
	tmpl, err := template.Compile("{{ v | tojson }}")
	if err != nil {
		t.Fatal(err)
	}
	out, err := tmpl.Render(map[string]any{"v": v}, template.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustStruct(t *testing.T, js string) *structpb.Struct {
	t.Helper()
	s := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(js), s); err != nil {
		t.Fatal(err)
	}
	return s
}

func mustValue(t *testing.T, js string) *structpb.Value {
	t.Helper()
	v := &structpb.Value{}
	if err := protojson.Unmarshal([]byte(js), v); err != nil {
		t.Fatal(err)
	}
	return v
}

// nested is a Value of depth levels of arrays and objects around a 1, made
// without recursion.
func nested(depth int) *structpb.Value {
	v := structpb.NewNumberValue(1)
	for i := range depth {
		if i%2 == 0 {
			v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{v}})
		} else {
			v = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"a": v}})
		}
	}
	return v
}

// The tool schema of transformers' documentation, as a client writes it; the
// template sees it with the keys sorted at every level, integers as
// integers, and other numbers as floats.
func TestStructValueSortsKeysAndKeepsIntegers(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"tool schema",
			`{"type": "object", "properties": {"location": {"type": "string", "description": "City"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["location"]}`,
			`{"properties": {"location": {"description": "City", "type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"], "type": "string"}}, "required": ["location"], "type": "object"}`},
		{"numbers", `{"n": 2, "neg": -3, "f": 0.5, "big": 1e300, "exp": 1e3, "max": 9007199254740992}`,
			`{"big": 1e+300, "exp": 1000, "f": 0.5, "max": 9007199254740992, "n": 2, "neg": -3}`},
		{"scalars", `{"t": true, "f": false, "z": null, "s": "héllo \"x\""}`,
			`{"f": false, "s": "héllo \"x\"", "t": true, "z": null}`},
		{"code point order", `{"b": 1, "B": 2, "é": 3, "a": 4}`, `{"B": 2, "a": 4, "b": 1, "é": 3}`},
		{"empty", `{}`, `{}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := structValue(mustStruct(t, tc.in), "f")
			if err != nil {
				t.Fatal(err)
			}
			if got := tojson(t, m); got != tc.want {
				t.Fatalf("tojson = %s\nwant     %s", got, tc.want)
			}
		})
	}
}

// A string is OpenAI's form of a tool call's arguments: JSON text, decoded
// with its key order kept. An object is sorted like any Struct; unset
// arguments are {}.
func TestArgumentsValue(t *testing.T) {
	tests := []struct {
		name string
		in   *structpb.Value
		want string
	}{
		{"object", mustValue(t, `{"unit": "celsius", "city": "Paris"}`), `{"city": "Paris", "unit": "celsius"}`},
		{"JSON text keeps its order", structpb.NewStringValue(`{"unit": "celsius", "city": "Paris"}`), `{"unit": "celsius", "city": "Paris"}`},
		{"unset", nil, `{}`},
		{"a list", mustValue(t, `[1, "a"]`), `[1, "a"]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := argumentsValue(tc.in, "args")
			if err != nil {
				t.Fatal(err)
			}
			if got := tojson(t, v); got != tc.want {
				t.Fatalf("tojson = %s, want %s", got, tc.want)
			}
		})
	}
}

// The limits of JSON text hold for Structs too, and every refusal is
// INVALID_ARGUMENT naming the field.
func TestJSONValueLimits(t *testing.T) {
	big := strings.Repeat("x", template.MaxJSONBytes/2+1)
	tests := []struct {
		name string
		in   *structpb.Value
		want string // "" accepted
	}{
		{"as deep as the limit", nested(template.MaxJSONDepth), ""},
		{"one level deeper", nested(template.MaxJSONDepth + 1), "deeper than 128 levels"},
		{"far deeper", nested(5000), "deeper than 128 levels"},
		{"NaN", structpb.NewNumberValue(math.NaN()), "must be finite"},
		{"infinity", structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(math.Inf(-1))}}), "must be finite"},
		{"no kind", structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{{}}}), "no kind set"},
		{"too many bytes", structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{
			structpb.NewStringValue(big), structpb.NewStringValue(big)}}), "bytes of keys and strings"},
		{"a string that is not JSON", structpb.NewStringValue("{oops"), "not valid JSON"},
		{"JSON text too deep", structpb.NewStringValue(strings.Repeat("[", 200) + strings.Repeat("]", 200)), "128"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := argumentsValue(tc.in, "messages[0].tool_calls[0].function.arguments")
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if k, _ := fault.KindOf(err); k != fault.Invalid || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), "messages[0].tool_calls[0].function.arguments") {
				t.Fatalf("err = %v, want INVALID_ARGUMENT naming the field and saying %q", err, tc.want)
			}
		})
	}
	// A Struct field counts its own level: 128 levels in all.
	s := &structpb.Struct{Fields: map[string]*structpb.Value{"a": nested(template.MaxJSONDepth - 1)}}
	if _, err := structValue(s, "chat_template_kwargs"); err != nil {
		t.Fatalf("128 levels: %v", err)
	}
	s = &structpb.Struct{Fields: map[string]*structpb.Value{"a": nested(template.MaxJSONDepth)}}
	_, err := structValue(s, "chat_template_kwargs")
	if f, ok := fault.As(err); !ok || f.Kind != fault.Invalid || f.Field != "chat_template_kwargs" ||
		!strings.Contains(err.Error(), "chat_template_kwargs nests") {
		t.Fatalf("129 levels: %v, want INVALID_ARGUMENT naming chat_template_kwargs", err)
	}
}

// FuzzChatConversation decodes arbitrary bytes as a ChatRequest and converts
// it to what the template sees. It must never panic, every refusal is
// INVALID_ARGUMENT, and what is accepted converts the same again after a
// round trip through the wire (whose map order differs run to run).
func FuzzChatConversation(f *testing.F) {
	seed := &kvgatev1.ChatRequest{
		Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "hi"}, {Role: "assistant", ToolCalls: []*kvgatev1.ToolCall{
			{Function: &kvgatev1.FunctionCall{Name: "f", Arguments: structpb.NewStringValue(`{"b": 1, "a": [2.5, null]}`)}},
			{Function: &kvgatev1.FunctionCall{Name: "g", Arguments: structpb.NewListValue(&structpb.ListValue{})}},
		}}},
		Tools: []*kvgatev1.Tool{{Function: &kvgatev1.FunctionDefinition{Name: "f", Parameters: &structpb.Struct{
			Fields: map[string]*structpb.Value{"type": structpb.NewStringValue("object"), "n": structpb.NewNumberValue(3)}}}}},
		ChatTemplateKwargs: &structpb.Struct{Fields: map[string]*structpb.Value{"enable_thinking": structpb.NewBoolValue(false)}},
	}
	b, err := proto.Marshal(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{0x42, 0x00})                         // chat_template_kwargs: an empty Struct
	f.Add([]byte{0x42, 0x04, 0x0a, 0x02, 0x0a, 0x00}) // an entry with an empty key and no value
	f.Fuzz(func(t *testing.T, data []byte) {
		var req kvgatev1.ChatRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		c, err := Conversation(&req)
		if err != nil {
			if k, _ := fault.KindOf(err); k != fault.Invalid {
				t.Fatalf("refused with %v, want an invalid-request fault", err)
			}
			return
		}
		again, err := proto.Marshal(&req)
		if err != nil {
			t.Fatal(err)
		}
		var req2 kvgatev1.ChatRequest
		if err := proto.Unmarshal(again, &req2); err != nil {
			t.Fatal(err)
		}
		c2, err := Conversation(&req2)
		if err != nil {
			t.Fatalf("accepted, then refused after a round trip: %v", err)
		}
		vars := func(c textmodel.Conversation) map[string]any {
			return map[string]any{"messages": c.Messages, "tools": c.Tools, "kwargs": c.Kwargs}
		}
		if a, b := renderJSON(t, vars(c)), renderJSON(t, vars(c2)); a != b {
			t.Fatalf("the same request converted two ways:\n%s\n%s", a, b)
		}
	})
}

// renderJSON prints vars' values with tojson.
func renderJSON(t *testing.T, vars map[string]any) string {
	t.Helper()
	tmpl, err := template.Compile("{{ messages | tojson }}{{ tools | tojson }}{{ kwargs | tojson }}")
	if err != nil {
		t.Fatal(err)
	}
	if vars["kwargs"] == (*template.OrderedMap)(nil) {
		vars["kwargs"] = nil
	}
	out, err := tmpl.Render(vars, template.Options{})
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return out
}

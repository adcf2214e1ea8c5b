package server_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// jsonTemplate prints what a template sees of a Chat request's JSON fields:
// tools and tool-call arguments through tojson (as tool templates print
// them), and two kwargs as variables.
const jsonTemplate = `{{ tools | tojson }}
{%- for m in messages %}{% for c in m.tool_calls or [] %}|{{ c.function.arguments | tojson }}{% endfor %}{% endfor -%}
|{{ enable_thinking }}|{{ depth }}`

// The JSON fields of a Chat request reach the template with their keys
// sorted at every level, whatever order the client's runtime put them in on
// the wire (a Struct is a map): the same request always makes the same
// prompt. A tool call's arguments sent as JSON text keep their order.
func TestChatJSONFieldsReachTheTemplate(t *testing.T) {
	tmpl := filepath.Join(t.TempDir(), "json.jinja")
	if err := os.WriteFile(tmpl, []byte(jsonTemplate), 0o644); err != nil {
		t.Fatal(err)
	}
	f := startFleet(t, fleetOptions{workers: 1, text: true, chatTemplate: tmpl})
	sp := &kvgatev1.SamplingParams{MaxNewTokens: u32(16), IgnoreEos: true, Seed: i32(3)}

	params := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(`{"type": "object", "properties": {"unit": {"type": "string"}, "city": {"type": "string"}}, "required": ["city"]}`), params); err != nil {
		t.Fatal(err)
	}
	kwargs, err := structpb.NewStruct(map[string]any{"enable_thinking": false, "depth": 2})
	if err != nil {
		t.Fatal(err)
	}
	args, err := structpb.NewValue(map[string]any{"unit": "celsius", "city": "Paris"})
	if err != nil {
		t.Fatal(err)
	}
	messages := []*kvgatev1.ChatMessage{
		{Role: "user", Content: "weather?"},
		{Role: "assistant", ToolCalls: []*kvgatev1.ToolCall{
			{Function: &kvgatev1.FunctionCall{Name: "get", Arguments: args}},
			{Function: &kvgatev1.FunctionCall{Name: "get", Arguments: structpb.NewStringValue(`{"unit": "kelvin", "city": "Oslo"}`)}},
		}},
	}
	req := &kvgatev1.ChatRequest{Messages: messages, ChatTemplateKwargs: kwargs, SamplingParams: sp,
		Tools: []*kvgatev1.Tool{{Type: "function", Function: &kvgatev1.FunctionDefinition{Name: "get", Description: "Weather", Parameters: params}}}}

	const want = `[{"type": "function", "function": {"name": "get", "description": "Weather", "parameters": ` +
		`{"properties": {"city": {"type": "string"}, "unit": {"type": "string"}}, "required": ["city"], "type": "object"}}}]` +
		`|{"city": "Paris", "unit": "celsius"}|{"unit": "kelvin", "city": "Oslo"}|False|2`
	ids, err := f.text.Encode(want, false)
	if err != nil {
		t.Fatal(err)
	}
	expected := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: ids, SamplingParams: sp}).complete

	// The request as the generated client sends it, then with the tool
	// parameters' entries on the wire in two opposite orders.
	got := f.mustChatComplete(t, req)
	if got.Usage.PromptTokens != uint32(len(ids)) || !slices.Equal(got.OutputIds, expected.OutputIds) {
		t.Fatalf("Chat: %d prompt tokens, output %v; the prompt %q is %d ids and gives %v",
			got.Usage.PromptTokens, got.OutputIds, want, len(ids), expected.OutputIds)
	}
	keys := []string{"properties", "required", "type"}
	for _, order := range [][]string{keys, {keys[2], keys[1], keys[0]}} {
		c := rawChat(t, f, chatWithParamsInOrder(t, req, params, order))
		if c.Usage.PromptTokens != uint32(len(ids)) || !slices.Equal(c.OutputIds, expected.OutputIds) {
			t.Fatalf("parameters sent in the order %v: %d prompt tokens, output %v; want the sorted rendering's %d, %v",
				order, c.Usage.PromptTokens, c.OutputIds, len(ids), expected.OutputIds)
		}
	}
}

// chatWithParamsInOrder is req's wire form with one tool whose parameters'
// entries are written in the order given.
func chatWithParamsInOrder(t *testing.T, req *kvgatev1.ChatRequest, params *structpb.Struct, order []string) []byte {
	t.Helper()
	rest := proto.Clone(req).(*kvgatev1.ChatRequest)
	rest.Tools = nil
	b, err := proto.Marshal(rest)
	if err != nil {
		t.Fatal(err)
	}
	var s []byte
	for _, k := range order {
		v, err := proto.Marshal(params.Fields[k])
		if err != nil {
			t.Fatal(err)
		}
		entry := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), k)
		entry = protowire.AppendBytes(protowire.AppendTag(entry, 2, protowire.BytesType), v)
		s = protowire.AppendBytes(protowire.AppendTag(s, 1, protowire.BytesType), entry) // Struct.fields
	}
	fn := req.Tools[0].Function
	def := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), fn.Name)
	def = protowire.AppendString(protowire.AppendTag(def, 2, protowire.BytesType), fn.Description)
	def = protowire.AppendBytes(protowire.AppendTag(def, 4, protowire.BytesType), s)             // parameters
	tool := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "function") // type
	tool = protowire.AppendBytes(protowire.AppendTag(tool, 2, protowire.BytesType), def)         // function
	return protowire.AppendBytes(protowire.AppendTag(b, 3, protowire.BytesType), tool)           // tools
}

// rawChat sends a ChatRequest's bytes as they are and returns its completion.
func rawChat(t *testing.T, f *fleet, req []byte) *kvgatev1.GenerateComplete {
	t.Helper()
	b, err := rawCall(t, f, "/kvgate.v1.Router/Chat", req)
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	var resp kvgatev1.ChatResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.GetComplete() == nil {
		t.Fatalf("Chat (stream=false) sent %v, want the completion", &resp)
	}
	return resp.GetComplete()
}

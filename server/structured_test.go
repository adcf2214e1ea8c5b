package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

const citySchema = `{"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}}, "required": ["city", "days"]}`

// A JSON schema constraint reaches the engine, which answers with a document
// valid against it, through Generate's sampling_params and Chat's
// response_format, on both protocols.
func TestStructuredOutputReachesTheEngine(t *testing.T) {
	schema, err := structpb.NewStruct(map[string]any{"type": "object",
		"properties": map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}},
		"required":   []any{"city", "days"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, protocol := range protocols {
		t.Run(protocol, func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: protocol, workers: 1, text: true})
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			check := func(what, text string) {
				t.Helper()
				var doc map[string]any
				if err := json.Unmarshal([]byte(text), &doc); err != nil {
					t.Fatalf("%s: the answer %q is not a JSON object: %v", what, text, err)
				}
				if _, ok := doc["city"].(string); !ok {
					t.Fatalf("%s: the answer %q has no string city", what, text)
				}
				if _, ok := doc["days"].(float64); !ok {
					t.Fatalf("%s: the answer %q has no number days", what, text)
				}
			}
			g, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{Text: "Plan a trip",
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(200), Constraint: &kvgatev1.SamplingParams_JsonSchema{JsonSchema: citySchema}}})
			if err != nil {
				t.Fatal(err)
			}
			check("Generate json_schema", g.complete.GetText())
			for _, rf := range []*kvgatev1.ResponseFormat{
				{Type: "json_schema", JsonSchema: &kvgatev1.JSONSchemaFormat{Name: "trip", Schema: schema}},
				{Type: "json_object"},
			} {
				c, err := f.chat(ctx, t, &kvgatev1.ChatRequest{Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "Plan a trip"}},
					ResponseFormat: rf, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(200)}})
				if err != nil {
					t.Fatal(err)
				}
				if rf.Type == "json_object" {
					if !json.Valid([]byte(c.complete.GetText())) || !strings.HasPrefix(c.complete.GetText(), "{") {
						t.Fatalf("json_object: %q", c.complete.GetText())
					}
					continue
				}
				check("Chat response_format", c.complete.GetText())
			}
		})
	}
}

// Constraints the router refuses before dispatch, each naming its field.
func TestStructuredOutputValidation(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, text: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs := []*kvgatev1.ChatMessage{{Role: "user", Content: "hi"}}
	for _, tc := range []struct {
		name string
		gen  *kvgatev1.SamplingParams
		chat *kvgatev1.ChatRequest
		want string
	}{
		{name: "a schema that is not JSON", gen: &kvgatev1.SamplingParams{Constraint: &kvgatev1.SamplingParams_JsonSchema{JsonSchema: `{"type": "object"`}},
			want: "sampling_params.json_schema"},
		{name: "a schema with an unknown type", gen: &kvgatev1.SamplingParams{Constraint: &kvgatev1.SamplingParams_JsonSchema{JsonSchema: `{"type": "strin"}`}},
			want: "sampling_params.json_schema"},
		{name: "a regex that does not parse", gen: &kvgatev1.SamplingParams{Constraint: &kvgatev1.SamplingParams_Regex{Regex: `[a-z`}},
			want: "sampling_params.regex"},
		{name: "a grammar without root", gen: &kvgatev1.SamplingParams{Constraint: &kvgatev1.SamplingParams_Ebnf{Ebnf: `start ::= "a"`}},
			want: "sampling_params.ebnf"},
		{name: "a structural tag that is not one", gen: &kvgatev1.SamplingParams{Constraint: &kvgatev1.SamplingParams_StructuralTag{StructuralTag: `{"structures": 3}`}},
			want: "sampling_params.structural_tag"},
		{name: "an unknown response_format", chat: &kvgatev1.ChatRequest{Messages: msgs, ResponseFormat: &kvgatev1.ResponseFormat{Type: "yaml"}},
			want: "response_format.type"},
		{name: "json_schema without a schema", chat: &kvgatev1.ChatRequest{Messages: msgs, ResponseFormat: &kvgatev1.ResponseFormat{Type: "json_schema"}},
			want: "response_format.json_schema.schema is unset"},
		{name: "two constraints", chat: &kvgatev1.ChatRequest{Messages: msgs, ResponseFormat: &kvgatev1.ResponseFormat{Type: "json_object"},
			SamplingParams: &kvgatev1.SamplingParams{Constraint: &kvgatev1.SamplingParams_Regex{Regex: "a+"}}},
			want: "both constrain"},
		{name: "tool_choice required without tools", chat: &kvgatev1.ChatRequest{Messages: msgs, ToolChoice: &kvgatev1.ToolChoice{Mode: "required"}},
			want: "tools is empty"},
		{name: "an unknown tool_choice mode", chat: &kvgatev1.ChatRequest{Messages: msgs, ToolChoice: &kvgatev1.ToolChoice{Mode: "sometimes"}},
			want: "tool_choice.mode"},
		{name: "a tool_choice naming an undeclared function", chat: &kvgatev1.ChatRequest{Messages: msgs, Tools: weatherTools(t),
			ToolChoice: &kvgatev1.ToolChoice{Function: "get_time"}}, want: "get_weather"},
		{name: "an unknown tool_call_parser", chat: &kvgatev1.ChatRequest{Messages: msgs, Tools: weatherTools(t),
			ToolCallParser: ptr("xml")}, want: "tool_call_parser"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.gen != nil {
				_, err = f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: []uint32{1, 2, 3}, SamplingParams: tc.gen})
			} else {
				_, err = f.chat(ctx, t, tc.chat)
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Fatalf("%v; want INVALID_ARGUMENT saying %q", err, tc.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// weatherTools declares get_weather(city, days).
func weatherTools(t testing.TB) []*kvgatev1.Tool {
	t.Helper()
	params, err := structpb.NewStruct(map[string]any{"type": "object",
		"properties": map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}},
		"required":   []any{"city"}})
	if err != nil {
		t.Fatal(err)
	}
	return []*kvgatev1.Tool{{Type: "function", Function: &kvgatev1.FunctionDefinition{Name: "get_weather", Description: "Weather in a city", Parameters: params}}}
}

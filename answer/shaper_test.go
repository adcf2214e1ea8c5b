package answer_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvgate/kvgate/answer"
	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/parse"
	"github.com/kvgate/kvgate/workers"
)

func ptr[T any](v T) *T { return &v }

// weatherTools declares get_weather(city).
func weatherTools(t *testing.T) []*kvgatev1.Tool {
	t.Helper()
	params, err := structpb.NewStruct(map[string]any{"type": "object",
		"properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"}})
	if err != nil {
		t.Fatal(err)
	}
	return []*kvgatev1.Tool{{Type: "function", Function: &kvgatev1.FunctionDefinition{Name: "get_weather", Parameters: params}}}
}

// Every request whose answer cannot be read as asked is refused by New,
// before any prompt exists, as an invalid-request fault naming the field.
func TestNewRefusesWhatCannotBeRead(t *testing.T) {
	tools := weatherTools(t)
	regex := &kvgatev1.SamplingParams{Constraint: &kvgatev1.SamplingParams_Regex{Regex: "a+"}}
	tests := []struct {
		name  string
		req   *kvgatev1.ChatRequest
		field string
		msg   string // the message holds it
	}{
		{"unknown reasoning_parser", &kvgatev1.ChatRequest{ReasoningParser: ptr("nope")}, "reasoning_parser", `unknown reasoning parser "nope"`},
		{"unknown tool_call_parser", &kvgatev1.ChatRequest{Tools: tools, ToolCallParser: ptr("nope")}, "tool_call_parser", `unknown tool-call parser "nope"`},
		{"unknown tool_choice mode", &kvgatev1.ChatRequest{Tools: tools, ToolChoice: &kvgatev1.ToolChoice{Mode: "sometimes"}}, "tool_choice.mode", `tool_choice.mode is "sometimes"`},
		{"mode and function", &kvgatev1.ChatRequest{Tools: tools, ToolChoice: &kvgatev1.ToolChoice{Mode: "auto", Function: "get_weather"}}, "tool_choice", "are both set"},
		{"a required call without tools", &kvgatev1.ChatRequest{ToolChoice: &kvgatev1.ToolChoice{Mode: "required"}}, "tool_choice", "tools is empty"},
		{"a function not among the tools", &kvgatev1.ChatRequest{Tools: tools, ToolChoice: &kvgatev1.ToolChoice{Function: "other"}}, "tool_choice", "tool_choice: "},
		{"a forced call on a constrained answer", &kvgatev1.ChatRequest{Tools: tools, ToolChoice: &kvgatev1.ToolChoice{Mode: "required"}, SamplingParams: regex}, "tool_choice", "already constrained"},
		{"unknown response_format type", &kvgatev1.ChatRequest{ResponseFormat: &kvgatev1.ResponseFormat{Type: "yaml"}}, "response_format.type", `response_format.type is "yaml"`},
		{"json_schema without a schema", &kvgatev1.ChatRequest{ResponseFormat: &kvgatev1.ResponseFormat{Type: "json_schema"}}, "response_format.json_schema.schema", "is unset"},
		{"a schema with type text", &kvgatev1.ChatRequest{ResponseFormat: &kvgatev1.ResponseFormat{Type: "text", JsonSchema: &kvgatev1.JSONSchemaFormat{}}}, "response_format.type", "set type to \"json_schema\""},
		{"response_format and sampling_params", &kvgatev1.ChatRequest{ResponseFormat: &kvgatev1.ResponseFormat{Type: "json_object"}, SamplingParams: regex}, "response_format", "give one"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := answer.New(tc.req, "req-1", answer.Rules{})
			f, ok := fault.As(err)
			if !ok || f.Kind != fault.Invalid || f.Field != tc.field || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v (%+v), want an invalid %s saying %q", err, f, tc.field, tc.msg)
			}
		})
	}
}

// read streams out through one attempt of s, a byte at a time (the
// parsers must hold at every boundary), and returns the completion.
func read(s *answer.Shaper, out string) *kvgatev1.GenerateComplete {
	a := s.Start()
	for i := range len(out) {
		a.Push(out[i : i+1])
	}
	a.Finish("")
	c := &kvgatev1.GenerateComplete{FinishReason: kvgatev1.FinishReason_FINISH_REASON_STOP}
	a.Fill(c)
	return c
}

// A forced tool_choice constrains the answer with a JSON schema and reads
// it as the JSON that schema produces; the calls get ids made from the
// request id, the same on every attempt.
func TestForcedToolChoiceReadsTheJSON(t *testing.T) {
	tools := weatherTools(t)
	tests := []struct {
		name      string
		choice    *kvgatev1.ToolChoice
		out       string
		calls     []string // name and arguments, as JSON text
		content   string
		malformed bool
	}{
		{"a named function", &kvgatev1.ToolChoice{Function: "get_weather"}, `{"city": "Paris"}`,
			[]string{`get_weather {"city":"Paris"}`}, "", false},
		{"a named function cut short", &kvgatev1.ToolChoice{Function: "get_weather"}, `{"city": "Pa`,
			nil, `{"city": "Pa`, true},
		{"required calls", &kvgatev1.ToolChoice{Mode: "required"}, `[{"name": "get_weather", "parameters": {"city": "Paris"}}, {"name": "get_weather", "parameters": {"city": "Oslo"}}]`,
			[]string{`get_weather {"city":"Paris"}`, `get_weather {"city":"Oslo"}`}, "", false},
		{"required calls that are not an array", &kvgatev1.ToolChoice{Mode: "required"}, `{"name": "get_weather"}`,
			nil, `{"name": "get_weather"}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := answer.New(&kvgatev1.ChatRequest{Tools: tools, ToolChoice: tc.choice}, "req-1", answer.Rules{Thinks: true})
			if err != nil {
				t.Fatal(err)
			}
			if c := s.Constraint(); c.Kind != workers.JSONSchema || !s.ParsesTools() {
				t.Fatalf("constraint %+v, parses tools %v; want a JSON schema and tools parsed", c, s.ParsesTools())
			}
			first, again := read(s, tc.out), read(s, tc.out)
			var calls []string
			for i, c := range first.ToolCalls {
				args, err := protojson.Marshal(c.Function.Arguments)
				if err != nil {
					t.Fatal(err)
				}
				calls = append(calls, c.Function.Name+" "+string(args))
				if c.Id == "" || c.Id != again.ToolCalls[i].Id {
					t.Fatalf("call %d has id %q, then %q on another attempt; want one id", i, c.Id, again.ToolCalls[i].Id)
				}
			}
			if strings.Join(calls, "\n") != strings.Join(tc.calls, "\n") || first.Text != tc.content || first.MalformedToolCall != tc.malformed {
				t.Fatalf("calls %q, content %q, malformed %v; want %q, %q, %v", calls, first.Text, first.MalformedToolCall, tc.calls, tc.content, tc.malformed)
			}
			if first.ReasoningContent != "" {
				t.Fatalf("reasoning %q: a forced answer starts with its JSON", first.ReasoningContent)
			}
			want := kvgatev1.FinishReason_FINISH_REASON_STOP
			if len(tc.calls) > 0 {
				want = kvgatev1.FinishReason_FINISH_REASON_TOOL_CALLS
			}
			if first.FinishReason != want {
				t.Fatalf("finish %v, want %v", first.FinishReason, want)
			}
		})
	}
	a, _ := answer.New(&kvgatev1.ChatRequest{Tools: tools, ToolChoice: &kvgatev1.ToolChoice{Function: "get_weather"}}, "req-1", answer.Rules{})
	b, _ := answer.New(&kvgatev1.ChatRequest{Tools: tools, ToolChoice: &kvgatev1.ToolChoice{Function: "get_weather"}}, "req-2", answer.Rules{})
	if x, y := read(a, `{"city": "Paris"}`).ToolCalls[0].Id, read(b, `{"city": "Paris"}`).ToolCalls[0].Id; x == y {
		t.Fatalf("requests req-1 and req-2 both name their call %q", x)
	}
}

// The reasoning is split off when the request or the router asks for it,
// or the template thinks; a prompt that opens the block makes the answer
// start inside it. A nil shaper (Generate) passes the text through.
func TestReasoningSplit(t *testing.T) {
	tests := []struct {
		name               string
		m                  answer.Rules
		requested          *string
		prompt             string
		out                string
		reasoning, content string
	}{
		{"auto, a thinking template", answer.Rules{Thinks: true}, nil, "user: hi", "<think>hmm</think>Paris", "hmm", "Paris"},
		{"auto, a template that does not think", answer.Rules{}, nil, "user: hi", "<think>hmm</think>Paris", "", "<think>hmm</think>Paris"},
		{"the router's style", answer.Rules{ReasoningParser: "deepseek_r1"}, nil, "user: hi", "<think>hmm</think>Paris", "hmm", "Paris"},
		{"the request says none", answer.Rules{Thinks: true}, ptr("none"), "user: hi", "<think>hmm</think>Paris", "", "<think>hmm</think>Paris"},
		{"the prompt opens the block", answer.Rules{ReasoningParser: "deepseek_r1"}, nil, "user: hi<think>", "hmm</think>Paris", "hmm", "Paris"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := answer.New(&kvgatev1.ChatRequest{ReasoningParser: tc.requested}, "req-1", tc.m)
			if err != nil {
				t.Fatal(err)
			}
			// The prompt's ids stand for its bytes here.
			ids := make([]uint32, len(tc.prompt))
			for i := range ids {
				ids[i] = uint32(tc.prompt[i])
			}
			s.SawPrompt(ids, func(tail []uint32) string {
				b := make([]byte, len(tail))
				for i, id := range tail {
					b[i] = byte(id)
				}
				return string(b)
			})
			c := read(s, tc.out)
			if c.ReasoningContent != tc.reasoning || c.Text != tc.content {
				t.Fatalf("reasoning %q content %q; want %q and %q", c.ReasoningContent, c.Text, tc.reasoning, tc.content)
			}
		})
	}
	var generate *answer.Shaper
	if c := read(generate, "<think>raw</think>"); c.Text != "<think>raw</think>" || generate.ParsesTools() || generate.Constraint().Kind != workers.NoConstraint {
		t.Fatalf("a nil shaper changed the text to %q", c.Text)
	}
}

// A model family's format is parsed only when tools are given (or the
// format carries the reasoning), and its special-token markers are kept in
// the text the parser reads.
func TestToolFormatAndItsMarkers(t *testing.T) {
	hermes, err := parse.ToolFormatNamed("hermes")
	if err != nil {
		t.Fatal(err)
	}
	special := map[string]uint32{"<tool_call>": 7, "</tool_call>": 8}
	m := answer.Rules{ToolFormat: hermes, ToolFormatDetected: true, SpecialID: func(s string) (uint32, bool) {
		id, ok := special[s]
		return id, ok
	}}
	s, err := answer.New(&kvgatev1.ChatRequest{Tools: weatherTools(t)}, "req-1", m)
	if err != nil {
		t.Fatal(err)
	}
	if !s.ParsesTools() || len(s.KeepSpecial()) != 2 {
		t.Fatalf("parses tools %v, keeps %v; want tools parsed and both markers kept", s.ParsesTools(), s.KeepSpecial())
	}
	c := read(s, `<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>`)
	if len(c.ToolCalls) != 1 || c.ToolCalls[0].Function.Name != "get_weather" || c.Text != "" {
		t.Fatalf("calls %v, content %q; want one get_weather call", c.ToolCalls, c.Text)
	}
	for _, req := range []*kvgatev1.ChatRequest{{}, {Tools: weatherTools(t), ToolChoice: &kvgatev1.ToolChoice{Mode: "none"}}, {Tools: weatherTools(t), ToolCallParser: ptr("none")}} {
		s, err := answer.New(req, "req-1", m)
		if err != nil {
			t.Fatal(err)
		}
		if s.ParsesTools() {
			t.Fatalf("%v: tool calls parsed", req)
		}
	}
}

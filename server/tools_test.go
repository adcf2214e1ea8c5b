package server_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/workers/sim"
)

// realTemplate writes a model's real chat template, from the template
// package's golden cases, to a file for --chat-template.
func realTemplate(t testing.TB, model string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "tokenize", "template", "testdata", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases map[string]struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	tmpl := cases[model].ChatTemplate
	if tmpl == "" {
		t.Fatalf("no chat template for %s", model)
	}
	path := filepath.Join(t.TempDir(), "chat_template.jinja")
	if err := os.WriteFile(path, []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// chatAnswer is what a client assembles from a Chat: the completion's, or
// the chunks' folded as an OpenAI-compatible client folds deltas.
type chatAnswer struct {
	Reasoning, Content string
	Calls              []chatCall
	Malformed          bool
	Finish             kvgatev1.FinishReason
}

type chatCall struct{ ID, Name, Arguments string }

func fromCompletion(t testing.TB, c *kvgatev1.GenerateComplete) chatAnswer {
	t.Helper()
	a := chatAnswer{Reasoning: c.GetReasoningContent(), Content: c.GetText(), Malformed: c.GetMalformedToolCall(), Finish: c.GetFinishReason()}
	for _, tc := range c.GetToolCalls() {
		args, err := protojson.Marshal(tc.GetFunction().GetArguments())
		if err != nil {
			t.Fatal(err)
		}
		a.Calls = append(a.Calls, chatCall{ID: tc.GetId(), Name: tc.GetFunction().GetName(), Arguments: compactJSON(t, string(args))})
	}
	return a
}

func fromChunks(t testing.TB, chunks []*kvgatev1.GenerateChunk, finish kvgatev1.FinishReason) chatAnswer {
	t.Helper()
	a := chatAnswer{Finish: finish}
	byIndex := map[uint32]*chatCall{}
	var order []uint32
	var reasoning, content strings.Builder
	for _, c := range chunks {
		reasoning.WriteString(c.GetReasoningContent())
		content.WriteString(c.GetText())
		a.Malformed = a.Malformed || c.GetMalformedToolCall()
		for _, d := range c.GetToolCalls() {
			switch call, ok := byIndex[d.GetIndex()]; {
			case d.GetInvalid():
				delete(byIndex, d.GetIndex())
			case !ok:
				if d.GetName() == "" || d.GetId() == "" {
					t.Fatalf("the first delta of call %d has no name or id: %v", d.GetIndex(), d)
				}
				byIndex[d.GetIndex()] = &chatCall{ID: d.GetId(), Name: d.GetName(), Arguments: d.GetArguments()}
				order = append(order, d.GetIndex())
			default:
				if d.GetName() != "" {
					t.Fatalf("call %d named twice", d.GetIndex())
				}
				call.Arguments += d.GetArguments()
			}
		}
	}
	a.Reasoning, a.Content = reasoning.String(), content.String()
	for _, i := range order {
		if c, ok := byIndex[i]; ok {
			c.Arguments = compactJSON(t, c.Arguments)
			a.Calls = append(a.Calls, *c)
			delete(byIndex, i)
		}
	}
	return a
}

func compactJSON(t testing.TB, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("arguments %q are not JSON: %v", s, err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// A Chat with tools against a Qwen3-style engine answer (the real Qwen3
// chat template; scripted answers in Qwen3's format) returns reasoning,
// content and structured tool calls, the same streamed and not, on both
// protocols.
func TestChatToolCallsQwen3(t *testing.T) {
	const (
		thinkAndCall = "<think>\nThe user wants the weather in Paris; call get_weather.\n</think>\n\n" +
			"Let me look that up.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>"
		twoCalls = "<think>\nTwo cities.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n" +
			"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Berlin \\\"Mitte\\\"\", \"days\": 1}}\n</tool_call>"
		broken   = "<think>\nHmm.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}\n</tool_call>\nSorry."
		noThink  = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"
		trailing = "<think>\nok\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\nI asked for Oslo."
	)
	tmpl := realTemplate(t, "Qwen/Qwen3-0.6B")
	scripts := []sim.Script{{When: "weather in Paris", Text: thinkAndCall}, {When: "Paris and Berlin", Text: twoCalls},
		{When: "broken", Text: broken}, {When: "Rome", Text: noThink}, {When: "Oslo", Text: trailing}}
	noThinking, err := structpb.NewStruct(map[string]any{"enable_thinking": false})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, question string
		kwargs         bool
		want           chatAnswer
	}{
		{"reasoning, content and a call", "What is the weather in Paris?", false, chatAnswer{
			Reasoning: "The user wants the weather in Paris; call get_weather.", Content: "Let me look that up.\n",
			Calls:  []chatCall{{Name: "get_weather", Arguments: `{"city":"Paris","days":2}`}},
			Finish: kvgatev1.FinishReason_FINISH_REASON_TOOL_CALLS}},
		{"two calls", "Weather in Paris and Berlin?", false, chatAnswer{
			Reasoning: "Two cities.",
			Calls: []chatCall{{Name: "get_weather", Arguments: `{"city":"Paris"}`},
				{Name: "get_weather", Arguments: `{"city":"Berlin \"Mitte\"","days":1}`}},
			Finish: kvgatev1.FinishReason_FINISH_REASON_TOOL_CALLS}},
		{"a call whose JSON is invalid", "this is broken", false, chatAnswer{
			Reasoning: "Hmm.", Content: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}\n</tool_call>\nSorry.",
			Malformed: true, Finish: kvgatev1.FinishReason_FINISH_REASON_STOP}},
		{"a call and trailing content", "Oslo?", false, chatAnswer{
			Reasoning: "ok", Content: "I asked for Oslo.",
			Calls:  []chatCall{{Name: "get_weather", Arguments: `{"city":"Oslo"}`}},
			Finish: kvgatev1.FinishReason_FINISH_REASON_TOOL_CALLS}},
		{"enable_thinking false", "Rome?", true, chatAnswer{
			Calls:  []chatCall{{Name: "get_weather", Arguments: `{"city":"Rome"}`}},
			Finish: kvgatev1.FinishReason_FINISH_REASON_TOOL_CALLS}},
	} {
		for _, protocol := range protocols {
			t.Run(tc.name+"/"+protocol, func(t *testing.T) {
				f := startFleet(t, fleetOptions{protocol: protocol, workers: 1, text: true, chatTemplate: tmpl,
					sim: func(_ int, c *sim.Config) { c.Scripts = scripts }})
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				var answers []chatAnswer
				for _, stream := range []bool{false, true} {
					req := &kvgatev1.ChatRequest{RequestId: "tools-1", Stream: stream, Tools: weatherTools(t),
						Messages:       []*kvgatev1.ChatMessage{{Role: "user", Content: tc.question}},
						SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(300)}}
					if tc.kwargs {
						req.ChatTemplateKwargs = noThinking
					}
					r, err := f.chat(ctx, t, req)
					if err != nil {
						t.Fatal(err)
					}
					got := fromCompletion(t, r.complete)
					for i := range got.Calls {
						if got.Calls[i].ID == "" {
							t.Fatalf("call %d has no id", i)
						}
					}
					answers = append(answers, got)
					if stream {
						answers = append(answers, fromChunks(t, r.chunks, r.complete.GetFinishReason()))
					}
				}
				for i, got := range answers {
					if !sameAnswer(got, tc.want) {
						t.Fatalf("answer %d (0: completion, 1: streamed completion, 2: chunks):\n got %+v\nwant %+v", i, got, tc.want)
					}
					if i > 0 && !sameIDs(got, answers[0]) {
						t.Fatalf("answer %d has other call ids than the first: %+v vs %+v", i, got.Calls, answers[0].Calls)
					}
				}
			})
		}
	}
}

// answersOf is what a client makes of a Chat: the completion's answer and,
// streamed, the chunks' folded.
func answersOf(t testing.TB, r result, stream bool) []chatAnswer {
	t.Helper()
	answers := []chatAnswer{fromCompletion(t, r.complete)}
	if stream {
		answers = append(answers, fromChunks(t, r.chunks, r.complete.GetFinishReason()))
	}
	return answers
}

// expectAnswer holds every way a client reads a Chat (answersOf) to want.
func expectAnswer(t testing.TB, label string, r result, stream bool, want chatAnswer) {
	t.Helper()
	for _, got := range answersOf(t, r, stream) {
		if !sameAnswer(got, want) {
			t.Fatalf("%s stream=%v:\n got %+v\nwant %+v", label, stream, got, want)
		}
	}
}

// sameAnswer compares answers, ids aside (sameIDs compares those).
func sameAnswer(a, b chatAnswer) bool {
	if a.Reasoning != b.Reasoning || a.Content != b.Content || a.Malformed != b.Malformed || a.Finish != b.Finish || len(a.Calls) != len(b.Calls) {
		return false
	}
	for i := range a.Calls {
		if a.Calls[i].Name != b.Calls[i].Name || a.Calls[i].Arguments != b.Calls[i].Arguments {
			return false
		}
	}
	return true
}

func sameIDs(a, b chatAnswer) bool {
	for i := range a.Calls {
		if a.Calls[i].ID != b.Calls[i].ID {
			return false
		}
	}
	return true
}

// tool_choice "required" and a named function are enforced through a JSON
// schema constraint the engine honours (the simulator answers with a
// minimal valid document), and the answer is read as calls, streamed and
// not, on both protocols.
func TestChatToolChoiceForcesCalls(t *testing.T) {
	for _, protocol := range protocols {
		for _, choice := range []*kvgatev1.ToolChoice{{Function: "get_weather"}, {Mode: "required"}} {
			t.Run(protocol+"/"+choice.String(), func(t *testing.T) {
				f := startFleet(t, fleetOptions{protocol: protocol, workers: 1, text: true, chatTemplate: realTemplate(t, "Qwen/Qwen3-0.6B")})
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				for _, stream := range []bool{false, true} {
					r, err := f.chat(ctx, t, &kvgatev1.ChatRequest{Stream: stream, Tools: weatherTools(t), ToolChoice: choice,
						Messages:       []*kvgatev1.ChatMessage{{Role: "user", Content: "Anything"}},
						SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(300)}})
					if err != nil {
						t.Fatal(err)
					}
					for _, a := range answersOf(t, r, stream) {
						if a.Finish != kvgatev1.FinishReason_FINISH_REASON_TOOL_CALLS || a.Malformed || len(a.Calls) == 0 || a.Content != "" {
							t.Fatalf("stream=%v: %+v (text %q)", stream, a, r.complete.GetText())
						}
						for _, c := range a.Calls {
							var args map[string]any
							if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil || c.Name != "get_weather" {
								t.Fatalf("call %+v", c)
							}
							if _, ok := args["city"].(string); !ok {
								t.Fatalf("call %+v lacks its required city", c)
							}
						}
					}
				}
			})
		}
	}
}

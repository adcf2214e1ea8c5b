package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// tokenizerLookups is how many prompts the tokenizer caches were asked
// for, hits and misses of every level together.
func tokenizerLookups(t *testing.T, f *fleet) float64 {
	t.Helper()
	mfs, err := f.srv.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		switch mf.GetName() {
		case "kvgate_tokenizer_cache_hits_total", "kvgate_tokenizer_cache_misses_total":
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// A Chat whose fields are wrong is refused for them before its
// conversation is rendered and tokenized: the error names the field, not
// the template, even when the template would fail, and the tokenizer
// caches are never asked.
func TestCheapChatChecksComeBeforeTheTemplate(t *testing.T) {
	raising := filepath.Join(t.TempDir(), "raising.jinja")
	if err := os.WriteFile(raising, []byte(`{{ raise_exception('the template was rendered') }}`), 0o644); err != nil {
		t.Fatal(err)
	}
	fleets := []struct {
		name string
		f    *fleet
	}{
		{"template renders", startFleet(t, fleetOptions{workers: 1, text: true})},
		{"template raises", startFleet(t, fleetOptions{workers: 1, text: true, chatTemplate: raising})},
	}
	user := []*kvgatev1.ChatMessage{{Role: "user", Content: "What is the weather in Paris?"}}
	tools := weatherTools(t)
	tests := []struct {
		name  string
		req   *kvgatev1.ChatRequest
		field string // the message names it
	}{
		{"unknown tool_choice mode", &kvgatev1.ChatRequest{Tools: tools, ToolChoice: &kvgatev1.ToolChoice{Mode: "sometimes"}}, "tool_choice.mode"},
		{"tool_choice mode and function", &kvgatev1.ChatRequest{Tools: tools, ToolChoice: &kvgatev1.ToolChoice{Mode: "auto", Function: "get_weather"}}, "tool_choice.function"},
		{"a required call without tools", &kvgatev1.ChatRequest{ToolChoice: &kvgatev1.ToolChoice{Mode: "required"}}, "tools is empty"},
		{"a named function not among tools", &kvgatev1.ChatRequest{Tools: tools, ToolChoice: &kvgatev1.ToolChoice{Function: "no_such_tool"}}, "tool_choice"},
		{"unknown response_format type", &kvgatev1.ChatRequest{ResponseFormat: &kvgatev1.ResponseFormat{Type: "yaml"}}, "response_format.type"},
		{"response_format and a sampling constraint", &kvgatev1.ChatRequest{ResponseFormat: &kvgatev1.ResponseFormat{Type: "json_object"},
			SamplingParams: &kvgatev1.SamplingParams{Constraint: &kvgatev1.SamplingParams_Regex{Regex: "a+"}}}, "response_format and sampling_params"},
		{"unknown reasoning_parser", &kvgatev1.ChatRequest{ReasoningParser: ptr("no_such_style")}, "reasoning_parser"},
		{"unknown tool_call_parser", &kvgatev1.ChatRequest{Tools: tools, ToolCallParser: ptr("no_such_format")}, "tool_call_parser"},
	}
	for _, fl := range fleets {
		for _, tc := range tests {
			t.Run(fl.name+"/"+tc.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				tc.req.Messages = user
				before := tokenizerLookups(t, fl.f)
				_, err := fl.f.chat(ctx, t, tc.req)
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.field) {
					t.Fatalf("err = %v, want INVALID_ARGUMENT naming %s", err, tc.field)
				}
				if strings.Contains(err.Error(), "template") {
					t.Fatalf("err = %v: the template was rendered before the fields were checked", err)
				}
				if after := tokenizerLookups(t, fl.f); after != before {
					t.Fatalf("the tokenizer caches were asked %v times for a request refused for its fields", after-before)
				}
			})
		}
	}
}

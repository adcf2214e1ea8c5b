package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

var weatherTool = map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "description": "Weather forecast",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}}}}}

// Chat completions answer in OpenAI's shapes, streamed and not: the
// reasoning apart from the content, tool calls as structured calls (and as
// deltas when streamed), and finish reasons as OpenAI names them.
func TestOpenAIChatCompletions(t *testing.T) {
	hr := startHTTPRouter(t)
	for _, tc := range []struct {
		name         string
		req          map[string]any
		content      string
		reasoning    string
		call         string // the called function, with its arguments' JSON
		finishReason string
	}{
		{name: "reasoning apart from content",
			req:     map[string]any{"messages": []any{map[string]any{"role": "system", "content": "Be brief."}, map[string]any{"role": "user", "content": "What is the capital of France?"}}},
			content: "The capital of France is Paris.", reasoning: "The user wants the capital of France.", finishReason: "stop"},
		{name: "content as a list of text parts",
			req:     map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "What is the capital"}, map[string]any{"type": "text", "text": " of France?"}}}}},
			content: "The capital of France is Paris.", reasoning: "The user wants the capital of France.", finishReason: "stop"},
		{name: "tool call",
			req: map[string]any{"tools": []any{weatherTool}, "tool_choice": "auto",
				"messages": []any{map[string]any{"role": "user", "content": "What is the weather in Paris?"}}},
			reasoning: "Call get_weather.", call: `get_weather{"city":"Paris","days":2}`, finishReason: "tool_calls"},
		{name: "every role, with an earlier call and its result",
			req: map[string]any{"tools": []any{weatherTool}, "messages": []any{
				map[string]any{"role": "system", "content": "You forecast."},
				map[string]any{"role": "user", "content": "What is the weather in Paris?"},
				map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
					"function": map[string]any{"name": "get_weather", "arguments": `{"city": "Paris"}`}}}},
				map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
				map[string]any{"role": "user", "content": "And the weather in Paris tomorrow?"}}},
			reasoning: "Call get_weather.", call: `get_weather{"city":"Paris","days":2}`, finishReason: "tool_calls"},
		{name: "max_completion_tokens cuts the answer", req: map[string]any{"max_completion_tokens": 3, "messages": []any{map[string]any{"role": "user", "content": "What is the capital of France?"}}},
			finishReason: "length"},
	} {
		for _, stream := range []bool{false, true} {
			name := tc.name
			if stream {
				name += "/stream"
			}
			t.Run(name, func(t *testing.T) {
				req := map[string]any{"stream": stream}
				for k, v := range tc.req {
					req[k] = v
				}
				resp := hr.post(t, "/v1/chat/completions", jsonBody(t, req))
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d: %v", resp.StatusCode, decode(t, resp.Body))
				}
				var got chatResult
				if stream {
					if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
						t.Fatalf("Content-Type %q", ct)
					}
					got = chatFromStream(t, resp)
				} else {
					got = chatFromJSON(t, decode(t, resp.Body))
				}
				if got.finishReason != tc.finishReason {
					t.Errorf("finish_reason %q, want %q", got.finishReason, tc.finishReason)
				}
				if tc.finishReason == "length" {
					return // a cut answer's text is whatever 3 tokens spell
				}
				if got.content != tc.content || got.reasoning != tc.reasoning || got.call != tc.call {
					t.Errorf("got content %q reasoning %q call %q\nwant content %q reasoning %q call %q",
						got.content, got.reasoning, got.call, tc.content, tc.reasoning, tc.call)
				}
			})
		}
	}
}

// chatResult is what a client makes of a chat completion.
type chatResult struct {
	content, reasoning, call, finishReason string
}

func chatFromJSON(t *testing.T, v map[string]any) chatResult {
	t.Helper()
	if v["object"] != "chat.completion" || !strings.HasPrefix(v["id"].(string), "chatcmpl-") {
		t.Errorf("object %v id %v", v["object"], v["id"])
	}
	msg := path(v, "choices", 0, "message")
	var r chatResult
	r.content, _ = path(msg, "content").(string)
	r.reasoning, _ = path(msg, "reasoning_content").(string)
	r.finishReason, _ = path(v, "choices", 0, "finish_reason").(string)
	if calls, _ := path(msg, "tool_calls").([]any); len(calls) > 0 {
		if len(calls) != 1 || path(calls, 0, "type") != "function" || path(calls, 0, "id") == "" {
			t.Errorf("tool_calls %v", calls)
		}
		r.call = path(calls, 0, "function", "name").(string) + compact(t, path(calls, 0, "function", "arguments").(string))
	}
	if u := path(v, "usage", "total_tokens"); u == nil || u.(float64) == 0 {
		t.Errorf("usage %v", v["usage"])
	}
	return r
}

func chatFromStream(t *testing.T, resp *http.Response) chatResult {
	t.Helper()
	events, done := sseEvents(t, resp.Body)
	if !done {
		t.Fatal("the stream did not end with data: [DONE]")
	}
	var (
		r          chatResult
		name, args string
		callID     string
	)
	for i, ev := range events {
		if ev["object"] != "chat.completion.chunk" {
			t.Fatalf("event %d: object %v", i, ev["object"])
		}
		d := path(ev, "choices", 0, "delta")
		if i == 0 && path(d, "role") != "assistant" {
			t.Errorf("the first delta has no assistant role: %v", ev)
		}
		s, _ := path(d, "content").(string)
		r.content += s
		s, _ = path(d, "reasoning_content").(string)
		r.reasoning += s
		calls, _ := path(d, "tool_calls").([]any)
		for _, c := range calls {
			if path(c, "index").(float64) != 0 {
				t.Errorf("tool call delta index %v", path(c, "index"))
			}
			if id, _ := path(c, "id").(string); id != "" {
				callID = id
			}
			n, _ := path(c, "function", "name").(string)
			name += n
			a, _ := path(c, "function", "arguments").(string)
			args += a
		}
		if f, _ := path(ev, "choices", 0, "finish_reason").(string); f != "" {
			r.finishReason = f
		}
	}
	if name != "" {
		if callID == "" {
			t.Error("the streamed call has no id")
		}
		r.call = name + compact(t, args)
	}
	return r
}

func compact(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("arguments %q are not JSON: %v", s, err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Sampling options reach the engine and come back in OpenAI's shapes:
// stop strings cut the answer (streamed and not), and logprobs come one
// per generated token with the asked number of alternatives.
func TestOpenAIChatOptions(t *testing.T) {
	hr := startHTTPRouter(t)
	question := `"messages": [{"role": "user", "content": "What is the capital of France?"}]`
	for _, stream := range []bool{false, true} {
		body := `{"stop": ["Paris", "Berlin"], "stream": ` + strconv.FormatBool(stream) + `, ` + question + `}`
		resp := hr.post(t, "/v1/chat/completions", body)
		var got chatResult
		if stream {
			got = chatFromStream(t, resp)
		} else {
			got = chatFromJSON(t, decode(t, resp.Body))
		}
		if got.content != "The capital of France is " || got.finishReason != "stop" {
			t.Errorf("stream=%v: stop [Paris Berlin] gave %q (%s), want the answer cut before Paris", stream, got.content, got.finishReason)
		}
	}

	resp := hr.post(t, "/v1/chat/completions", `{"logprobs": true, "top_logprobs": 2, `+question+`}`)
	v := decode(t, resp.Body)
	content, _ := path(v, "choices", 0, "logprobs", "content").([]any)
	if n := int(path(v, "usage", "completion_tokens").(float64)); len(content) != n || n == 0 {
		t.Fatalf("%d logprobs for %d tokens: %v", len(content), n, v)
	}
	for i, c := range content {
		tops, _ := path(c, "top_logprobs").([]any)
		if _, ok := path(c, "logprob").(float64); !ok || len(tops) != 2 {
			t.Fatalf("logprobs.content[%d] = %v, want a logprob and 2 alternatives", i, c)
		}
	}
	resp = hr.post(t, "/v1/chat/completions", `{"chat_template_kwargs": "enable_thinking", `+question+`}`)
	if v := decode(t, resp.Body); resp.StatusCode != http.StatusBadRequest || path(v, "error", "param") != "chat_template_kwargs" {
		t.Errorf("chat_template_kwargs as a string: %d %v, want 400 naming it", resp.StatusCode, v)
	}
}

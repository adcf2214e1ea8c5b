package main

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
)

// response_format reaches the engine as a constraint: the simulated engine
// answers a JSON schema with its minimal instance (keys sorted), and
// json_object with an empty object.
func TestOpenAIResponseFormat(t *testing.T) {
	hr := startHTTPRouter(t)
	schema := `{"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}, "required": ["zeta", "alpha"]}`
	for _, tc := range []struct {
		name, format string
		wantKeys     []string
	}{
		{"json_schema", `{"type": "json_schema", "json_schema": {"name": "thing", "strict": true, "schema": ` + schema + `}}`, []string{"alpha", "zeta"}},
		{"json_object", `{"type": "json_object"}`, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := hr.post(t, "/v1/chat/completions", `{"messages": [{"role": "user", "content": "Describe a thing"}], "response_format": `+tc.format+`}`)
			v := decode(t, resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %v", resp.StatusCode, v)
			}
			content, _ := path(v, "choices", 0, "message", "content").(string)
			keys := jsonKeys(t, content)
			if strings.Join(keys, ",") != strings.Join(tc.wantKeys, ",") {
				t.Errorf("answer %s has keys %v, want %v", content, keys, tc.wantKeys)
			}
		})
	}
}

// jsonKeys lists a JSON object's keys in their order.
func jsonKeys(t *testing.T, s string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("%q is not a JSON object", s)
	}
	keys := []string{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// A long prompt sent twice is served from the KV cache the second time,
// and usage says so, in chat, text completions and /generate, streamed
// (with stream_options.include_usage) and not.
func TestOpenAIUsageReportsCachedTokens(t *testing.T) {
	hr := startHTTPRouter(t)
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20)
	ids := make([]int, 300)
	for i := range ids {
		ids[i] = 1000 + i
	}
	for _, tc := range []struct {
		name, path, body string
		cached           []any // where the cached tokens are in the answer
	}{
		{"chat", "/v1/chat/completions", jsonBody(t, map[string]any{"max_tokens": 2, "messages": []any{map[string]any{"role": "user", "content": "chat " + long}}}),
			[]any{"usage", "prompt_tokens_details", "cached_tokens"}},
		{"chat/stream", "/v1/chat/completions", jsonBody(t, map[string]any{"max_tokens": 2, "stream": true, "stream_options": map[string]any{"include_usage": true},
			"messages": []any{map[string]any{"role": "user", "content": "stream " + long}}}), []any{"usage", "prompt_tokens_details", "cached_tokens"}},
		{"completions with token ids", "/v1/completions", jsonBody(t, map[string]any{"max_tokens": 2, "prompt": append([]int{1}, ids...)}),
			[]any{"usage", "prompt_tokens_details", "cached_tokens"}},
		{"completions/stream", "/v1/completions", jsonBody(t, map[string]any{"max_tokens": 2, "stream": true, "stream_options": map[string]any{"include_usage": true}, "prompt": "text " + long}),
			[]any{"usage", "prompt_tokens_details", "cached_tokens"}},
		{"generate with input_ids", "/generate", jsonBody(t, map[string]any{"input_ids": append([]int{2}, ids...), "sampling_params": map[string]any{"max_new_tokens": 2}}),
			[]any{"meta_info", "cached_tokens"}},
		{"generate/stream", "/generate", jsonBody(t, map[string]any{"input_ids": append([]int{3}, ids...), "stream": true, "sampling_params": map[string]any{"max_new_tokens": 2}}),
			[]any{"meta_info", "cached_tokens"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cached [2]float64
			for i := range cached {
				resp := hr.post(t, tc.path, tc.body, "x-routing-key", "cache-"+tc.name)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d: %v", resp.StatusCode, decode(t, resp.Body))
				}
				var last map[string]any
				if strings.Contains(tc.body, `"stream":true`) {
					events, done := sseEvents(t, resp.Body)
					if !done || len(events) == 0 {
						t.Fatalf("stream of %d events, done=%v", len(events), done)
					}
					last = events[len(events)-1]
				} else {
					last = decode(t, resp.Body)
				}
				n, ok := path(last, tc.cached...).(float64)
				if !ok {
					t.Fatalf("answer %d has no %v: %v", i, tc.cached, last)
				}
				cached[i] = n
			}
			if cached[0] != 0 || cached[1] < 256 {
				t.Errorf("cached tokens %v on the first and second send; want 0, then most of the prompt", cached)
			}
		})
	}
}

// Text completions take a prompt as text or token ids and answer
// OpenAI's text_completion objects, with legacy logprobs when asked for.
func TestOpenAICompletions(t *testing.T) {
	hr := startHTTPRouter(t)
	resp := hr.post(t, "/v1/completions", `{"prompt": "What is the capital of France?", "logprobs": 2, "max_tokens": 50}`)
	v := decode(t, resp.Body)
	if resp.StatusCode != http.StatusOK || v["object"] != "text_completion" {
		t.Fatalf("status %d: %v", resp.StatusCode, v)
	}
	if got := path(v, "choices", 0, "text"); got != thinkThenAnswer {
		t.Errorf("text %q, want the scripted answer %q", got, thinkThenAnswer)
	}
	tokens, _ := path(v, "choices", 0, "logprobs", "tokens").([]any)
	lps, _ := path(v, "choices", 0, "logprobs", "token_logprobs").([]any)
	tops, _ := path(v, "choices", 0, "logprobs", "top_logprobs").([]any)
	completion := path(v, "usage", "completion_tokens").(float64)
	if len(tokens) != int(completion) || len(lps) != len(tokens) || len(tops) != len(tokens) || len(path(tops, 0).(map[string]any)) == 0 {
		t.Errorf("logprobs for %d tokens: %d tokens, %d logprobs, %d tops", int(completion), len(tokens), len(lps), len(tops))
	}

	resp = hr.post(t, "/v1/completions", `{"prompt": "What is the capital of France?", "stream": true}`)
	events, done := sseEvents(t, resp.Body)
	var text, finish string
	for _, ev := range events {
		s, _ := path(ev, "choices", 0, "text").(string)
		text += s
		if f, _ := path(ev, "choices", 0, "finish_reason").(string); f != "" {
			finish = f
		}
	}
	if !done || text != thinkThenAnswer || finish != "stop" {
		t.Errorf("streamed %q (finish %q, done %v), want %q", text, finish, done, thinkThenAnswer)
	}
}

// Embeddings come back in input order, as floats or as OpenAI's base64 of
// little-endian float32s (what the official SDKs ask for), the same
// vectors either way.
func TestOpenAIEmbeddings(t *testing.T) {
	hr := startHTTPRouter(t)
	vectors := func(format string, input any) [][]float32 {
		t.Helper()
		resp := hr.post(t, "/v1/embeddings", jsonBody(t, map[string]any{"input": input, "encoding_format": format}))
		v := decode(t, resp.Body)
		if resp.StatusCode != http.StatusOK || v["object"] != "list" {
			t.Fatalf("status %d: %v", resp.StatusCode, v)
		}
		if path(v, "usage", "prompt_tokens").(float64) == 0 {
			t.Errorf("usage %v", v["usage"])
		}
		var out [][]float32
		for i, d := range v["data"].([]any) {
			if path(d, "index").(float64) != float64(i) || path(d, "object") != "embedding" {
				t.Errorf("data[%d] = %v", i, d)
			}
			var vec []float32
			switch e := path(d, "embedding").(type) {
			case string:
				b, err := base64.StdEncoding.DecodeString(e)
				if err != nil {
					t.Fatal(err)
				}
				for j := 0; j+4 <= len(b); j += 4 {
					vec = append(vec, math.Float32frombits(binary.LittleEndian.Uint32(b[j:])))
				}
			case []any:
				for _, x := range e {
					vec = append(vec, float32(x.(float64)))
				}
			}
			out = append(out, vec)
		}
		return out
	}
	floats := vectors("float", []string{"one", "two"})
	b64 := vectors("base64", []string{"one", "two"})
	if len(floats) != 2 || len(floats[0]) != 8 {
		t.Fatalf("got %d vectors of %d, want 2 of 8", len(floats), len(floats[0]))
	}
	for i := range floats {
		for j := range floats[i] {
			if floats[i][j] != b64[i][j] {
				t.Fatalf("vector %d differs between float and base64: %v vs %v", i, floats[i], b64[i])
			}
		}
	}
	if ids := vectors("", [][]int{{1, 2, 3}}); len(ids) != 1 || len(ids[0]) != 8 {
		t.Errorf("token-id input: %v", ids)
	}
}

// /v1/models lists what Admin.ListModels lists, and /generate answers in
// SGLang's shape, token in, token out.
func TestOpenAIModelsAndGenerate(t *testing.T) {
	hr := startHTTPRouter(t)
	resp, err := http.Get(hr.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	v := decode(t, resp.Body)
	data, _ := v["data"].([]any)
	if resp.StatusCode != http.StatusOK || v["object"] != "list" || len(data) != 1 || path(data, 0, "object") != "model" || path(data, 0, "id") == "" {
		t.Fatalf("status %d: %v", resp.StatusCode, v)
	}

	gen := hr.post(t, "/generate", `{"input_ids": [1, 2, 3, 4, 5], "sampling_params": {"max_new_tokens": 4, "temperature": 0, "ignore_eos": true}, "return_logprob": true, "rid": "rl-1"}`)
	g := decode(t, gen.Body)
	out, _ := g["output_ids"].([]any)
	if gen.StatusCode != http.StatusOK || len(out) != 4 || path(g, "meta_info", "id") != "rl-1" ||
		path(g, "meta_info", "finish_reason", "type") != "length" || path(g, "meta_info", "completion_tokens") != float64(4) ||
		path(g, "meta_info", "prompt_tokens") != float64(5) {
		t.Fatalf("status %d: %v", gen.StatusCode, g)
	}
	if lps, _ := path(g, "meta_info", "output_token_logprobs").([]any); len(lps) != 4 || path(lps, 0, 1) != out[0] {
		t.Errorf("output_token_logprobs %v for output %v", lps, out)
	}
}

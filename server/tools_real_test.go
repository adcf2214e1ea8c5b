package server_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/workers/sim"
)

// A tool-call format whose markers are special tokens (Mistral's
// [TOOL_CALLS] and [ARGS], Llama 3.1's <|python_tag|>, gpt-oss's channels)
// is still parsed: the router keeps those tokens' text while it skips the
// other special tokens. The engine's tokenizer here is the simulator's
// with [TOOL_CALLS] and [ARGS] added as special tokens, as Mistral's
// tokenizers have them; "none" shows the markers are skipped otherwise.
func TestChatKeepsSpecialToolMarkers(t *testing.T) {
	const answer = "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}"
	dir := simTokenizerWith(t, "[TOOL_CALLS]", "[ARGS]")
	f := startFleet(t, fleetOptions{workers: 1, text: true, sim: func(_ int, c *sim.Config) {
		c.TokenizerDir = dir
		c.Scripts = []sim.Script{{When: "Paris", Text: answer}}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, tc := range []struct {
		parser string
		want   chatAnswer
	}{
		{"mistral", chatAnswer{Calls: []chatCall{{Name: "get_weather", Arguments: `{"city":"Paris"}`}},
			Finish: kvgatev1.FinishReason_FINISH_REASON_TOOL_CALLS}},
		{"none", chatAnswer{Content: "get_weather{\"city\": \"Paris\"}", Finish: kvgatev1.FinishReason_FINISH_REASON_STOP}},
	} {
		for _, stream := range []bool{false, true} {
			r, err := f.chat(ctx, t, &kvgatev1.ChatRequest{Stream: stream, Tools: weatherTools(t), ToolCallParser: &tc.parser,
				Messages:       []*kvgatev1.ChatMessage{{Role: "user", Content: "Weather in Paris?"}},
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(100)}})
			if err != nil {
				t.Fatal(err)
			}
			expectAnswer(t, tc.parser, r, stream, tc.want)
		}
	}
}

// simTokenizerWith is the simulator's built-in tokenizer with extra
// special tokens appended to its vocabulary.
func simTokenizerWith(t testing.TB, specials ...string) string {
	t.Helper()
	src := filepath.Join("..", "workers", "sim", "tokenizer")
	raw, err := os.ReadFile(filepath.Join(src, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tok map[string]any
	if err := json.Unmarshal(raw, &tok); err != nil {
		t.Fatal(err)
	}
	added := tok["added_tokens"].([]any)
	next := 0.0
	for _, a := range added {
		next = max(next, a.(map[string]any)["id"].(float64)+1)
	}
	for i, s := range specials {
		added = append(added, map[string]any{"id": next + float64(i), "content": s, "single_word": false,
			"lstrip": false, "rstrip": false, "normalized": false, "special": true})
	}
	tok["added_tokens"] = added
	dir := t.TempDir()
	out, err := json.Marshal(tok)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(src, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tokenizer.json": out, "tokenizer_config.json": cfg} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Real answers tokenized by their model's real tokenizer (so the engine
// streams them token by token as the model would) and rendered with the
// model's real chat template are parsed as they would be whole: Qwen3's
// hermes calls after its reasoning, and DeepSeek-R1's calls after the
// reasoning its template opens in the prompt.
func TestChatToolCallsOnRealTokenizers(t *testing.T) {
	if testing.Short() {
		t.Skip("loads two 150k-token vocabularies")
	}
	for _, tc := range []struct {
		tokenizer, template, answer string
		// reasoning is the request's reasoning_parser: this revision of
		// DeepSeek-R1's template writes no <think>, so auto would not
		// detect it.
		reasoning string
		want      chatAnswer
	}{
		{"qwen3", "Qwen/Qwen3-0.6B",
			"<think>\nParis, two days.\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>",
			"", chatAnswer{Reasoning: "Paris, two days.", Content: "Checking.\n",
				Calls: []chatCall{{Name: "get_weather", Arguments: `{"city":"Paris","days":2}`}}, Finish: kvgatev1.FinishReason_FINISH_REASON_TOOL_CALLS}},
		{"deepseek_v3", "deepseek-ai/DeepSeek-R1",
			"<think>\nThe user wants Paris.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			"deepseek_r1", chatAnswer{Reasoning: "The user wants Paris.",
				Calls: []chatCall{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}, Finish: kvgatev1.FinishReason_FINISH_REASON_TOOL_CALLS}},
	} {
		t.Run(tc.tokenizer, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join("..", "tokenize", "testdata", "tokenizers", tc.tokenizer)
			f := startFleet(t, fleetOptions{workers: 1, text: true, chatTemplate: realTemplate(t, tc.template),
				sim: func(_ int, c *sim.Config) {
					c.TokenizerDir = dir
					c.Scripts = []sim.Script{{When: "Paris", Text: tc.answer}}
				}})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for _, stream := range []bool{false, true} {
				req := &kvgatev1.ChatRequest{Stream: stream, Tools: weatherTools(t),
					Messages:       []*kvgatev1.ChatMessage{{Role: "user", Content: "Weather in Paris?"}},
					SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(200)}}
				if tc.reasoning != "" {
					req.ReasoningParser = &tc.reasoning
				}
				r, err := f.chat(ctx, t, req)
				if err != nil {
					t.Fatal(err)
				}
				if stream && len(r.chunks) < 10 {
					t.Fatalf("the answer came in %d chunks; the test wants it token by token", len(r.chunks))
				}
				expectAnswer(t, tc.tokenizer, r, stream, tc.want)
			}
		})
	}
}

// gpt-oss's harmony answer, whose channel markers are special tokens, is
// read whole by the harmony parser: the analysis channel is the reasoning
// (no <think> parser runs besides), a message to functions.NAME a call,
// and the final channel the content.
func TestChatHarmonyChannels(t *testing.T) {
	const (
		call = "<|channel|>analysis<|message|>The user asks about Paris.<|end|>" +
			"<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>"
		final = "<|channel|>analysis<|message|>Simple question.<|end|><|start|>assistant<|channel|>final<|message|>It is sunny in Rome.<|return|>"
	)
	dir := simTokenizerWith(t, "<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>", "<|constrain|>")
	f := startFleet(t, fleetOptions{workers: 1, text: true, sim: func(_ int, c *sim.Config) {
		c.TokenizerDir = dir
		c.Scripts = []sim.Script{{When: "Paris", Text: call}, {When: "Rome", Text: final}}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	harmony := "harmony"
	for _, tc := range []struct {
		question string
		noTools  bool
		want     chatAnswer
	}{
		{"Weather in Paris?", false, chatAnswer{Reasoning: "The user asks about Paris.",
			Calls: []chatCall{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}, Finish: kvgatev1.FinishReason_FINISH_REASON_TOOL_CALLS}},
		{"Weather in Rome?", false, chatAnswer{Reasoning: "Simple question.", Content: "It is sunny in Rome.",
			Finish: kvgatev1.FinishReason_FINISH_REASON_STOP}},
		// Without tools the channels are still parsed: they carry the
		// reasoning and the content.
		{"Weather in Rome?", true, chatAnswer{Reasoning: "Simple question.", Content: "It is sunny in Rome.",
			Finish: kvgatev1.FinishReason_FINISH_REASON_STOP}},
	} {
		for _, stream := range []bool{false, true} {
			tools := weatherTools(t)
			if tc.noTools {
				tools = nil
			}
			r, err := f.chat(ctx, t, &kvgatev1.ChatRequest{Stream: stream, Tools: tools, ToolCallParser: &harmony,
				ReasoningParser: ptr("qwen3"), // ignored: harmony carries the reasoning itself
				Messages:        []*kvgatev1.ChatMessage{{Role: "user", Content: tc.question}},
				SamplingParams:  &kvgatev1.SamplingParams{MaxNewTokens: u32(100)}})
			if err != nil {
				t.Fatal(err)
			}
			expectAnswer(t, tc.question, r, stream, tc.want)
		}
	}
}

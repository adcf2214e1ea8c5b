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
	"github.com/kvgate/kvgate/workers/sim"
)

// A scripted engine's answer reaches a Chat client exactly, streamed and
// not, on both protocols: the base for testing what kvgate makes of a
// model family's output (reasoning, tool calls) end to end.
func TestScriptedAnswerReachesChat(t *testing.T) {
	const answer = "<think>\nThe user wants the capital of France.\n</think>\n\nThe capital of France is Paris."
	for _, protocol := range protocols {
		t.Run(protocol, func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: protocol, workers: 1, text: true,
				sim: func(_ int, c *sim.Config) {
					c.Scripts = []sim.Script{{When: "capital of France", Text: answer}}
				}})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, stream := range []bool{false, true} {
				r, err := f.chat(ctx, t, &kvgatev1.ChatRequest{Stream: stream,
					Messages:       []*kvgatev1.ChatMessage{{Role: "user", Content: "What is the capital of France?"}},
					SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(200)}})
				if err != nil {
					t.Fatal(err)
				}
				if got := r.complete.GetText(); got != answer || r.complete.GetFinishReason() != kvgatev1.FinishReason_FINISH_REASON_STOP {
					t.Fatalf("stream=%v: completion %q (%v), want %q", stream, got, r.complete.GetFinishReason(), answer)
				}
				var streamed strings.Builder
				for _, c := range r.chunks {
					streamed.WriteString(c.GetText())
				}
				if stream && streamed.String() != answer {
					t.Fatalf("streamed chunks say %q", streamed.String())
				}
			}
			// Another prompt is sampled as before.
			r, err := f.chat(ctx, t, &kvgatev1.ChatRequest{Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "hello"}},
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(8)}})
			if err != nil || r.complete.GetText() == answer {
				t.Fatalf("an unscripted prompt: %q, %v", r.complete.GetText(), err)
			}
		})
	}
}

// Chat splits a scripted answer's reasoning from its content, streamed and
// not, identically: with the block opened by the answer (Qwen3) or by the
// prompt (a DeepSeek-R1 style template), and not at all with "none".
func TestChatSplitsReasoning(t *testing.T) {
	const (
		qwen3  = "<think>\nThe user wants the capital of France.\n</think>\n\nThe capital of France is Paris."
		r1     = "Paris is the capital; say so briefly.\n</think>\n\n**Paris**"
		r1Tmpl = `{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
<think>
{% endif %}`
	)
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "r1.jinja")
	if err := os.WriteFile(tmpl, []byte(r1Tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	scripts := []sim.Script{{When: "France", Text: qwen3}, {When: "Germany", Text: r1}}
	for _, tc := range []struct {
		name, template, parser, question string
		reasoning, content               string
		code                             codes.Code
	}{
		{"qwen3: the answer opens the block", "", "qwen3", "the capital of France?",
			"The user wants the capital of France.", "The capital of France is Paris.", codes.OK},
		{"deepseek_r1: the prompt opens the block", tmpl, "deepseek_r1", "the capital of Germany?",
			"Paris is the capital; say so briefly.", "**Paris**", codes.OK},
		{"none: raw text", "", "none", "the capital of France?", "", qwen3, codes.OK},
		{"the router's default: the template writes no <think>", "", "", "the capital of France?", "", qwen3, codes.OK},
		{"the router's default: the template writes <think>", tmpl, "", "the capital of Germany?",
			"Paris is the capital; say so briefly.", "**Paris**", codes.OK},
		{"an unknown parser", "", "mistral", "the capital of France?", "", "", codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleet(t, fleetOptions{workers: 1, text: true, chatTemplate: tc.template,
				sim: func(_ int, c *sim.Config) { c.Scripts = scripts }})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, stream := range []bool{false, true} {
				req := &kvgatev1.ChatRequest{Stream: stream, Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: tc.question}},
					SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(200)}}
				if tc.parser != "" {
					req.ReasoningParser = &tc.parser
				}
				r, err := f.chat(ctx, t, req)
				if status.Code(err) != tc.code {
					t.Fatalf("stream=%v: %v, want %v", stream, err, tc.code)
				}
				if err != nil {
					return
				}
				if got := r.complete.GetReasoningContent(); got != tc.reasoning || r.complete.GetText() != tc.content {
					t.Fatalf("stream=%v: reasoning %q content %q; want %q and %q", stream, got, r.complete.GetText(), tc.reasoning, tc.content)
				}
				if !stream {
					continue
				}
				var reasoning, content strings.Builder
				for _, c := range r.chunks {
					reasoning.WriteString(c.GetReasoningContent())
					content.WriteString(c.GetText())
				}
				if reasoning.String() != tc.reasoning || content.String() != tc.content {
					t.Fatalf("chunks: reasoning %q content %q", reasoning.String(), content.String())
				}
			}
		})
	}
}

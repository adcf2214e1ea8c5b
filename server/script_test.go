package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/workers/sim"
)

// A scripted engine's answer reaches a Chat client exactly, streamed and
// not, on both protocols: the base for testing what kvgate makes of a
// model family's output (reasoning, tool calls) end to end.
func TestScriptedAnswerReachesChat(t *testing.T) {
	const answer = "<think>\nThe user wants the capital of France.\n</think>\n\nThe capital of France is Paris."
	for _, protocol := range []string{"sglang", "vllm"} {
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

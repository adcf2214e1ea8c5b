package workers_test

import (
	"slices"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"

	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestVLLMStreamedCompletionListsTheWholeOutput: SMG's vLLM servicer (the
// gRPC server of real vLLM engines) ends a streamed Generate with a
// completion that repeats the last chunk, its ids, count and
// log-probabilities, instead of listing the whole output. The adapter hands on
// the completion every engine's completion is read as: the whole output,
// counted whole, so the stream passes CheckedStream and usage counts every
// token streamed.
func TestVLLMStreamedCompletionListsTheWholeOutput(t *testing.T) {
	for _, tc := range []struct {
		name    string
		repeats bool
	}{
		{"the completion lists the whole output", false},
		{"the completion repeats the last chunk", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := simConfig()
			cfg.Protocol = "vllm"
			cfg.Faults.CompletionRepeatsLastChunk = tc.repeats
			srv, err := sim.Start(cfg, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Stop)
			w, err := workers.Connect(testutil.Context(t, 5*time.Second), srv.Addr(), workers.ConnectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			const n = 8
			maxNew := uint32(n)
			st, err := w.Backend().Generate(testutil.Context(t, 5*time.Second), &workers.GenerateRequest{RequestID: "delta", InputIDs: []uint32{1, 2, 3},
				Sampling: workers.Sampling{MaxNewTokens: &maxNew, IgnoreEOS: true}, Logprobs: &workers.LogprobRequest{Output: true}})
			if err != nil {
				t.Fatal(err)
			}
			s := workers.CheckedStream(st, cfg.VocabSize)
			var streamed []uint32
			logprobs := 0
			for {
				ch, err := s.Recv()
				if err != nil {
					t.Fatalf("after %d tokens: %v", len(streamed), err)
				}
				streamed = append(streamed, ch.TokenIDs...)
				logprobs += len(ch.Logprobs)
				if f := ch.Final; f != nil {
					if len(streamed) != n || !slices.Equal(f.OutputIDs, streamed) || f.CompletionTokens != n {
						t.Fatalf("streamed %v; completion lists %v and counts %d, want all %d", streamed, f.OutputIDs, f.CompletionTokens, n)
					}
					if logprobs != n || (len(f.Logprobs) != 0 && len(f.Logprobs) != n) {
						t.Fatalf("%d log-probabilities streamed, %d in the completion; want %d, and the completion's none or all", logprobs, len(f.Logprobs), n)
					}
					return
				}
			}
		})
	}
}

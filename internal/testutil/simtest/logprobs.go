package simtest

import (
	"errors"
	"io"
	"testing"

	"github.com/kvgate/kvgate/workers"
)

// StreamLogprobs is a stream read to its end: the tokens, the output
// log-probabilities of chunks and completion, and every place prompt
// log-probabilities appeared.
type StreamLogprobs struct {
	Tokens                       []uint32
	ChunkLogprobs, FinalLogprobs []workers.Logprob
	Prompts                      [][]workers.Logprob // each message's non-empty PromptLogprobs
	Final                        *workers.Completion
}

// ReadLogprobs reads s to its end (its completion, then io.EOF) and fails
// the test on any error.
func ReadLogprobs(t testing.TB, s workers.Stream) StreamLogprobs {
	t.Helper()
	var r StreamLogprobs
	for {
		c, err := s.Recv()
		if errors.Is(err, io.EOF) && r.Final != nil {
			return r
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		r.Tokens = append(r.Tokens, c.TokenIDs...)
		r.ChunkLogprobs = append(r.ChunkLogprobs, c.Logprobs...)
		if len(c.PromptLogprobs) > 0 {
			r.Prompts = append(r.Prompts, c.PromptLogprobs)
		}
		if c.Final != nil {
			r.Final = c.Final
			r.FinalLogprobs = c.Final.Logprobs
			if len(c.Final.PromptLogprobs) > 0 {
				r.Prompts = append(r.Prompts, c.Final.PromptLogprobs)
			}
		}
	}
}

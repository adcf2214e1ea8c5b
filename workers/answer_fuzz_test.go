package workers

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/trtllm"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/fault"
)

// FuzzEngineAnswer decodes any message an engine of each protocol may
// stream in answer to a Generate (any chunk or completion, log-probability
// lists of any shape and length), as the adapter reads it, and then as the
// checked stream reads the result. It must never panic, and what it
// refuses is the engine's fault (Corrupt or Unavailable), never a client's
// mistake: the router retries or fails the attempt on the worker, and a
// client is not told its request was wrong.
func FuzzEngineAnswer(f *testing.F) {
	seeds := []struct {
		protocol uint8
		m        proto.Message
	}{
		{0, &sglang.GenerateResponse{Response: &sglang.GenerateResponse_Chunk{Chunk: &sglang.GenerateStreamChunk{TokenIds: []uint32{5, 6}, PromptTokens: 3, CompletionTokens: 2,
			OutputLogprobs: &sglang.OutputLogProbs{TokenLogprobs: []float32{-0.1, -0.2}, TokenIds: []uint32{5, 6}}}}}},
		{0, &sglang.GenerateResponse{Response: &sglang.GenerateResponse_Complete{Complete: &sglang.GenerateComplete{OutputIds: []uint32{5, 6, 7}, FinishReason: "stop",
			MatchedStop: &sglang.GenerateComplete_MatchedTokenId{MatchedTokenId: 7}}}}},
		{1, &vllm.GenerateResponse{Response: &vllm.GenerateResponse_Chunk{Chunk: &vllm.GenerateStreamChunk{TokenIds: []uint32{1}, PromptTokens: 2, CompletionTokens: 1}}}},
		{1, &vllm.GenerateResponse{Response: &vllm.GenerateResponse_Complete{Complete: &vllm.GenerateComplete{OutputIds: []uint32{1, 2}, FinishReason: "length"}}}},
		{2, &trtllm.GenerateResponse{Response: &trtllm.GenerateResponse_Chunk{Chunk: &trtllm.GenerateStreamChunk{TokenIds: []uint32{9}}}}},
		{2, &trtllm.GenerateResponse{Response: &trtllm.GenerateResponse_Complete{Complete: &trtllm.GenerateComplete{OutputTokenIds: []uint32{9, 10}, FinishReason: "stop"}}}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s.m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(s.protocol, b, true, true, uint8(2), uint16(1000))
	}
	f.Fuzz(func(t *testing.T, protocol uint8, data []byte, output, prompt bool, topK uint8, vocab uint16) {
		want := &LogprobRequest{Output: output, Prompt: prompt, TopK: int(topK % 21)}
		var (
			c   Chunk
			err error
		)
		switch protocol % 3 {
		case 0:
			m := &sglang.GenerateResponse{}
			if proto.Unmarshal(data, m) != nil {
				return
			}
			c, _, err = decodeSGLang(m, want)
		case 1:
			m := &vllm.GenerateResponse{}
			if proto.Unmarshal(data, m) != nil {
				return
			}
			c, _, err = decodeVLLM(m, want)
		case 2:
			m := &trtllm.GenerateResponse{}
			if proto.Unmarshal(data, m) != nil {
				return
			}
			c, _, err = decodeTRTLLM(m, want, []uint32{1, 2, 3, 4})
		}
		if err != nil {
			engineFault(t, "decode", err)
			return
		}
		s := CheckedStream(&oneChunk{c: c}, int(vocab))
		if _, err := s.Recv(); err != nil {
			engineFault(t, "check", err)
		}
	})
}

// engineFault fails t unless err is an engine's fault.
func engineFault(t *testing.T, what string, err error) {
	t.Helper()
	if k, _ := fault.KindOf(err); k != fault.Corrupt && k != fault.Unavailable {
		t.Fatalf("%s: %v (kind %v); want the engine's fault, Corrupt or Unavailable", what, err, k)
	}
}

// oneChunk is a Stream of one chunk.
type oneChunk struct{ c Chunk }

func (o *oneChunk) Recv() (Chunk, error) { return o.c, nil }

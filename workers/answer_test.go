package workers

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
)

// worstAnswer builds the largest completion each protocol can send for a
// request: every id the widest varint, every log-probability and
// alternative present, counters at their maximum, a 1 KiB matched stop
// string and a 273-byte request id (the router's longest).
func worstAnswer(prompt, output int, lp LogprobRequest) []proto.Message {
	ids := func(n int) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = math.MaxUint32
		}
		return out
	}
	vals := func(n int) []float32 { return make([]float32, n) }
	top := func(n int) []*sglang.TopLogProbs {
		out := make([]*sglang.TopLogProbs, n)
		for i := range out {
			out[i] = &sglang.TopLogProbs{Values: vals(lp.TopK), TokenIds: ids(lp.TopK)}
		}
		return out
	}
	vtop := func(n int) []*vllm.TopLogProbs {
		out := make([]*vllm.TopLogProbs, n)
		for i := range out {
			out[i] = &vllm.TopLogProbs{Values: vals(lp.TopK), TokenIds: ids(lp.TopK)}
		}
		return out
	}
	id := strings.Repeat("r", 273)
	stop := strings.Repeat("s", 1024)
	sc := &sglang.GenerateComplete{OutputIds: ids(output), FinishReason: "length", PromptTokens: math.MaxUint32,
		CompletionTokens: math.MaxUint32, CachedTokens: math.MaxUint32, Index: math.MaxUint32, ReasoningTokens: math.MaxUint32,
		MatchedStop: &sglang.GenerateComplete_MatchedStopStr{MatchedStopStr: stop}}
	vc := &vllm.GenerateComplete{OutputIds: ids(output), FinishReason: "length", PromptTokens: math.MaxUint32,
		CompletionTokens: math.MaxUint32, CachedTokens: math.MaxUint32, Index: math.MaxUint32,
		MatchedStop: &vllm.GenerateComplete_MatchedStopStr{MatchedStopStr: stop}}
	if lp.Output {
		sc.OutputLogprobs = &sglang.OutputLogProbs{TokenLogprobs: vals(output), TokenIds: ids(output), TopLogprobs: top(output)}
		vc.OutputLogprobs = &vllm.OutputLogProbs{TokenLogprobs: vals(output), TokenIds: ids(output), TopLogprobs: vtop(output)}
	}
	if lp.Prompt {
		sv := make([]*sglang.InputTokenLogProb, prompt)
		vv := make([]*vllm.InputTokenLogProb, prompt)
		for i := range sv {
			v := float32(-1)
			sv[i], vv[i] = &sglang.InputTokenLogProb{Value: &v}, &vllm.InputTokenLogProb{Value: &v}
		}
		sc.InputLogprobs = &sglang.InputLogProbs{TokenLogprobs: sv, TokenIds: ids(prompt), TopLogprobs: top(prompt)}
		vc.InputLogprobs = &vllm.InputLogProbs{TokenLogprobs: vv, TokenIds: ids(prompt), TopLogprobs: vtop(prompt)}
	}
	return []proto.Message{
		&sglang.GenerateResponse{RequestId: id, Response: &sglang.GenerateResponse_Complete{Complete: sc}},
		&vllm.GenerateResponse{Response: &vllm.GenerateResponse_Complete{Complete: vc}},
	}
}

// TestAnswerBytesBoundsEveryAnswer: AnswerBytes is at least the wire size
// of the largest completion either protocol can send for the request, from
// one position to many, with and without each kind of log-probabilities.
func TestAnswerBytesBoundsEveryAnswer(t *testing.T) {
	for _, prompt := range []int{1, 7, 1000, 4096} {
		for _, output := range []int{0, 1, 300} {
			for _, k := range []int{0, 1, 5, MaxTopLogprobs} {
				for _, lp := range []*LogprobRequest{nil, {Prompt: true, TopK: k}, {Output: true, TopK: k}, {Prompt: true, Output: true, TopK: k}} {
					bound := AnswerBytes(prompt, output, lp)
					want := LogprobRequest{}
					if lp != nil {
						want = *lp
					}
					for _, m := range worstAnswer(prompt, output, want) {
						if n := proto.Size(m); int64(n) > bound {
							t.Errorf("prompt %d, output %d, %+v: %T is %d bytes; AnswerBytes says at most %d",
								prompt, output, lp, m, n, bound)
						}
					}
				}
			}
		}
	}
}

// TestDefaultMaxAnswerBytesHoldsTheContext: the engine connections' default
// receive limit holds the answer of every split of an AnswerContextTokens
// context between prompt and output, with every log-probability at
// MaxTopLogprobs.
func TestDefaultMaxAnswerBytesHoldsTheContext(t *testing.T) {
	all := &LogprobRequest{Prompt: true, Output: true, TopK: MaxTopLogprobs}
	for _, prompt := range []int{1, AnswerContextTokens / 2, AnswerContextTokens - 1} {
		if n := AnswerBytes(prompt, AnswerContextTokens-prompt, all); n > DefaultMaxAnswerBytes {
			t.Errorf("prompt %d of %d: %d bytes > DefaultMaxAnswerBytes %d", prompt, AnswerContextTokens, n, DefaultMaxAnswerBytes)
		}
	}
	if n := AnswerBytes(1, AnswerContextTokens, all); n <= DefaultMaxAnswerBytes {
		t.Errorf("a context of AnswerContextTokens+1 fits (%d bytes): the limit is looser than documented", n)
	}
}

// TestLocalLimit: only gRPC's own size refusals are the router's limits;
// an engine's RESOURCE_EXHAUSTED (out of memory) and other codes are not.
func TestLocalLimit(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5298579 vs. 4194304)"), true},
		{status.Error(codes.ResourceExhausted, "grpc: received message after decompression larger than max 4194304"), true},
		{status.Error(codes.ResourceExhausted, "grpc: trying to send message larger than max (9 vs. 8)"), true},
		{fmt.Errorf("worker x: %w", status.Error(codes.ResourceExhausted, "grpc: received message larger than max (2 vs. 1)")), true},
		{status.Error(codes.ResourceExhausted, "KV cache is full"), false},
		{status.Error(codes.Unavailable, "grpc: received message larger than max"), false},
		{nil, false},
	}
	for _, tc := range tests {
		if got := LocalLimit(tc.err); got != tc.want {
			t.Errorf("LocalLimit(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}

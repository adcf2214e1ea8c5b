package workers_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
)

func vllmComplete(reason string) *vllm.GenerateResponse {
	return &vllm.GenerateResponse{Response: &vllm.GenerateResponse_Complete{
		Complete: &vllm.GenerateComplete{FinishReason: reason},
	}}
}

func TestVLLMSamplingTranslation(t *testing.T) {
	// What vLLM must receive for a request that sets nothing: no temperature
	// (the model's default applies), top_p and repetition penalty neutral.
	defaults := func() *vllm.SamplingParams {
		return &vllm.SamplingParams{TopP: 1, RepetitionPenalty: 1, N: 1}
	}
	tests := []struct {
		name string
		in   workers.Sampling
		want func(p *vllm.SamplingParams)
	}{
		{"unset means engine defaults", workers.Sampling{}, func(*vllm.SamplingParams) {}},
		{"temperature 0 is sent as present", workers.Sampling{Temperature: ptr[float32](0)},
			func(p *vllm.SamplingParams) { p.Temperature = ptr[float32](0) }},
		{"top_k -1 means disabled", workers.Sampling{TopK: ptr[int32](-1)}, func(*vllm.SamplingParams) {}},
		{"top_k 0 means disabled", workers.Sampling{TopK: ptr[int32](0)}, func(*vllm.SamplingParams) {}},
		{"top_k positive", workers.Sampling{TopK: ptr[int32](50)}, func(p *vllm.SamplingParams) { p.TopK = 50 }},
		{"seed", workers.Sampling{Seed: ptr[int32](-7)}, func(p *vllm.SamplingParams) { p.Seed = ptr[int32](-7) }},
		{"every field set",
			workers.Sampling{
				Temperature: ptr[float32](0.6), TopP: ptr[float32](0.95), TopK: ptr[int32](10), MinP: ptr[float32](0.1),
				FrequencyPenalty: ptr[float32](0.2), PresencePenalty: ptr[float32](0.3), RepetitionPenalty: ptr[float32](1.2),
				MaxNewTokens: ptr[uint32](128), MinNewTokens: 8, StopTokenIDs: []uint32{5}, IgnoreEOS: true, Seed: ptr[int32](42),
			},
			func(p *vllm.SamplingParams) {
				p.Temperature, p.TopP, p.TopK, p.MinP = ptr[float32](0.6), 0.95, 10, 0.1
				p.FrequencyPenalty, p.PresencePenalty, p.RepetitionPenalty = 0.2, 0.3, 1.2
				p.MaxTokens, p.MinTokens, p.StopTokenIds, p.IgnoreEos, p.Seed = ptr[uint32](128), 8, []uint32{5}, true, ptr[int32](42)
			}},
	}

	eng := &vllmEngine{replies: []*vllm.GenerateResponse{vllmComplete("length")}}
	b := workers.NewVLLMBackend(testutil.Dial(t, eng.start(t)))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := b.Generate(testutil.Context(t, 5*time.Second), &workers.GenerateRequest{RequestID: "v-" + tt.name, InputIDs: []uint32{4, 5}, Sampling: tt.in})
			if err != nil {
				t.Fatal(err)
			}
			drain(t, s)

			got := eng.lastGenerate()
			want := defaults()
			tt.want(want)
			if !proto.Equal(got.GetSamplingParams(), want) {
				t.Errorf("sampling params:\n got %v\nwant %v", got.GetSamplingParams(), want)
			}
			if got.GetRequestId() != "v-"+tt.name || !got.GetStream() ||
				!reflect.DeepEqual(got.GetTokenized().GetInputIds(), []uint32{4, 5}) {
				t.Errorf("request envelope: id %q stream %v input %v", got.GetRequestId(), got.GetStream(), got.GetTokenized().GetInputIds())
			}
		})
	}
}

func TestVLLMStreamTranslation(t *testing.T) {
	eng := &vllmEngine{replies: []*vllm.GenerateResponse{
		{Response: &vllm.GenerateResponse_Chunk{Chunk: &vllm.GenerateStreamChunk{
			TokenIds: []uint32{7, 8}, PromptTokens: 4, CompletionTokens: 2, CachedTokens: 2}}},
		{Response: &vllm.GenerateResponse_Complete{Complete: &vllm.GenerateComplete{
			OutputIds: []uint32{7, 8}, FinishReason: "length", PromptTokens: 4, CompletionTokens: 2, CachedTokens: 2,
			MatchedStop: &vllm.GenerateComplete_MatchedStopStr{MatchedStopStr: "</s>"}}}},
	}}
	b := workers.NewVLLMBackend(testutil.Dial(t, eng.start(t)))
	s, err := b.Generate(testutil.Context(t, 5*time.Second), &workers.GenerateRequest{RequestID: "v", InputIDs: []uint32{1, 2, 3, 4}})
	if err != nil {
		t.Fatal(err)
	}
	want := []workers.Chunk{
		{TokenIDs: []uint32{7, 8}, PromptTokens: 4, CompletionTokens: 2, CachedTokens: 2},
		{PromptTokens: 4, CompletionTokens: 2, CachedTokens: 2, Final: &workers.Completion{
			OutputIDs: []uint32{7, 8}, FinishReason: "length", PromptTokens: 4, CompletionTokens: 2, CachedTokens: 2,
		}},
	}
	if got := drain(t, s); !reflect.DeepEqual(got, want) {
		t.Errorf("chunks:\n got %+v\nwant %+v", got, want)
	}
}

func TestVLLMStreamEndsEarly(t *testing.T) {
	eng := &vllmEngine{replies: []*vllm.GenerateResponse{
		{Response: &vllm.GenerateResponse_Chunk{Chunk: &vllm.GenerateStreamChunk{TokenIds: []uint32{1}}}},
	}}
	b := workers.NewVLLMBackend(testutil.Dial(t, eng.start(t)))
	s, err := b.Generate(testutil.Context(t, 5*time.Second), &workers.GenerateRequest{RequestID: "cut"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	_, err = s.Recv()
	if !testutil.IsFault(err, fault.Unavailable) || !strings.Contains(err.Error(), `"cut"`) {
		t.Errorf("Recv = %v; want UNAVAILABLE naming the request", err)
	}
}

func TestVLLMManagement(t *testing.T) {
	eng := &vllmEngine{
		modelInfo: &vllm.GetModelInfoResponse{ModelPath: "/m/qwen", VocabSize: 151936, MaxContextLength: 32768, EosTokenIds: []int32{151645},
			MaxReqInputLen: 32767},
		loads: &vllm.GetLoadsResponse{Loads: []*vllm.SchedulerLoad{
			{NumRunningReqs: 4, NumWaitingReqs: 2, NumUsedTokens: 250, MaxTotalNumTokens: 1000, CacheHitRate: 0.25},
		}},
		health: func(int64) bool { return false },
	}
	b := workers.NewVLLMBackend(testutil.Dial(t, eng.start(t)))
	ctx := testutil.Context(t, 5*time.Second)

	info, err := b.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantInfo := workers.ModelInfo{Model: "/m/qwen", VocabSize: 151936, MaxContextLength: 32768, MaxInputTokens: 32767,
		EOSTokenIDs: []uint32{151645}, KVCapacityTokens: 1000}
	if !reflect.DeepEqual(info, wantInfo) {
		t.Errorf("Info = %+v, want %+v", info, wantInfo)
	}

	l, err := b.Loads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (workers.Load{Running: 4, Waiting: 2, UsedTokens: 250, MaxTotalTokens: 1000, TokenUsage: 0.25, CacheHitRate: 0.25}); !loadsClose(l, want) {
		t.Errorf("Loads = %+v, want %+v", l, want)
	}

	if err := b.Health(ctx); !errors.Is(err, workers.ErrUnhealthy) {
		t.Errorf("Health = %v, want ErrUnhealthy", err)
	}

	if err := b.Abort(ctx, "v-9"); err != nil {
		t.Fatal(err)
	}
	if got := testutil.Locked(&eng.mu, func() []string { return eng.aborts[0].GetRequestIds() }); !reflect.DeepEqual(got, []string{"v-9"}) {
		t.Errorf("AbortRequest ids = %v, want [v-9]", got)
	}
}

func TestVLLMInfoWithoutLoads(t *testing.T) {
	eng := &vllmEngine{} // GetLoads unimplemented
	b := workers.NewVLLMBackend(testutil.Dial(t, eng.start(t)))
	info, err := b.Info(testutil.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if info.Model != "test/vllm-model" || info.KVCapacityTokens != 0 {
		t.Errorf("Info = %+v; want the model path and unknown capacity", info)
	}
	if _, err := b.Loads(testutil.Context(t, 5*time.Second)); status.Code(err) != codes.Unimplemented {
		t.Errorf("Loads = %v; want the engine's UNIMPLEMENTED status unchanged", err)
	}
}

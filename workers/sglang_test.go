package workers_test

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
)

func ptr[T any](v T) *T { return &v }

func sglangComplete(reason string) *sglang.GenerateResponse {
	return &sglang.GenerateResponse{Response: &sglang.GenerateResponse_Complete{
		Complete: &sglang.GenerateComplete{FinishReason: reason},
	}}
}

func TestSGLangSamplingTranslation(t *testing.T) {
	// What SGLang must receive for a request that sets nothing.
	defaults := func() *sglang.SamplingParams {
		return &sglang.SamplingParams{Temperature: 1, TopP: 1, TopK: -1, RepetitionPenalty: 1, N: 1}
	}
	tests := []struct {
		name string
		in   workers.Sampling
		want func(p *sglang.SamplingParams)
	}{
		{"unset means engine defaults", workers.Sampling{}, func(*sglang.SamplingParams) {}},
		{"greedy temperature 0 is sent as 0", workers.Sampling{Temperature: ptr[float32](0)},
			func(p *sglang.SamplingParams) { p.Temperature = 0 }},
		{"top_k 0 means disabled", workers.Sampling{TopK: ptr[int32](0)}, func(*sglang.SamplingParams) {}},
		{"top_k -1 means disabled", workers.Sampling{TopK: ptr[int32](-1)}, func(*sglang.SamplingParams) {}},
		{"top_k positive", workers.Sampling{TopK: ptr[int32](40)}, func(p *sglang.SamplingParams) { p.TopK = 40 }},
		{"every field set",
			workers.Sampling{
				Temperature: ptr[float32](0.7), TopP: ptr[float32](0.9), TopK: ptr[int32](20), MinP: ptr[float32](0.05),
				FrequencyPenalty: ptr[float32](0.5), PresencePenalty: ptr[float32](0.25), RepetitionPenalty: ptr[float32](1.1),
				MaxNewTokens: ptr[uint32](64), MinNewTokens: 4, StopTokenIDs: []uint32{2, 7}, IgnoreEOS: true,
			},
			func(p *sglang.SamplingParams) {
				p.Temperature, p.TopP, p.TopK, p.MinP = 0.7, 0.9, 20, 0.05
				p.FrequencyPenalty, p.PresencePenalty, p.RepetitionPenalty = 0.5, 0.25, 1.1
				p.MaxNewTokens, p.MinNewTokens, p.StopTokenIds, p.IgnoreEos = ptr[uint32](64), 4, []uint32{2, 7}, true
			}},
		{"max_new_tokens 0 is sent, not dropped", workers.Sampling{MaxNewTokens: ptr[uint32](0)},
			func(p *sglang.SamplingParams) { p.MaxNewTokens = ptr[uint32](0) }},
		{"seed travels in custom_params", workers.Sampling{Seed: ptr[int32](1234)},
			func(p *sglang.SamplingParams) {
				p.CustomParams = &structpb.Struct{Fields: map[string]*structpb.Value{
					"sampling_seed": structpb.NewNumberValue(1234),
				}}
			}},
	}

	eng := &sglangEngine{replies: []*sglang.GenerateResponse{sglangComplete("stop")}}
	b := workers.NewSGLangBackend(testutil.Dial(t, eng.start(t)))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testutil.Context(t, 5*time.Second)
			s, err := b.Generate(ctx, &workers.GenerateRequest{RequestID: "req-" + tt.name, InputIDs: []uint32{1, 2, 3}, Sampling: tt.in})
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
			if got.GetRequestId() != "req-"+tt.name || !got.GetStream() ||
				!reflect.DeepEqual(got.GetTokenized().GetInputIds(), []uint32{1, 2, 3}) {
				t.Errorf("request envelope: id %q stream %v input %v", got.GetRequestId(), got.GetStream(), got.GetTokenized().GetInputIds())
			}
		})
	}
}

// drain reads s to its end and fails the test unless it ends with a completion
// and then io.EOF.
func drain(t *testing.T, s workers.Stream) []workers.Chunk {
	t.Helper()
	var out []workers.Chunk
	for {
		c, err := s.Recv()
		if errors.Is(err, io.EOF) {
			if len(out) == 0 || out[len(out)-1].Final == nil {
				t.Fatalf("io.EOF without a completion first: %+v", out)
			}
			return out
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		out = append(out, c)
	}
}

func TestSGLangStreamTranslation(t *testing.T) {
	chunk := func(ids []uint32, p, c, cached uint32) *sglang.GenerateResponse {
		return &sglang.GenerateResponse{RequestId: "r", Response: &sglang.GenerateResponse_Chunk{
			Chunk: &sglang.GenerateStreamChunk{TokenIds: ids, PromptTokens: p, CompletionTokens: c, CachedTokens: cached},
		}}
	}
	eng := &sglangEngine{replies: []*sglang.GenerateResponse{
		chunk([]uint32{10, 11}, 5, 2, 3),
		{RequestId: "r"}, // neither chunk nor complete: skipped
		chunk([]uint32{12}, 5, 3, 3),
		{RequestId: "r", Response: &sglang.GenerateResponse_Complete{Complete: &sglang.GenerateComplete{
			OutputIds: []uint32{10, 11, 12}, FinishReason: "stop", PromptTokens: 5, CompletionTokens: 3, CachedTokens: 3,
			MatchedStop: &sglang.GenerateComplete_MatchedTokenId{MatchedTokenId: 12},
		}}},
	}}
	b := workers.NewSGLangBackend(testutil.Dial(t, eng.start(t)))
	s, err := b.Generate(testutil.Context(t, 5*time.Second), &workers.GenerateRequest{RequestID: "r", InputIDs: []uint32{1, 2, 3, 4, 5}})
	if err != nil {
		t.Fatal(err)
	}
	got := drain(t, s)
	want := []workers.Chunk{
		{TokenIDs: []uint32{10, 11}, PromptTokens: 5, CompletionTokens: 2, CachedTokens: 3},
		{TokenIDs: []uint32{12}, PromptTokens: 5, CompletionTokens: 3, CachedTokens: 3},
		{PromptTokens: 5, CompletionTokens: 3, CachedTokens: 3, Final: &workers.Completion{
			OutputIDs: []uint32{10, 11, 12}, FinishReason: "stop", MatchedStopTokenID: ptr[uint32](12),
			PromptTokens: 5, CompletionTokens: 3, CachedTokens: 3,
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("chunks:\n got %+v\nwant %+v", got, want)
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("Recv after io.EOF = %v, want io.EOF again", err)
	}
}

func TestSGLangStreamErrors(t *testing.T) {
	partial := &sglang.GenerateResponse{Response: &sglang.GenerateResponse_Chunk{
		Chunk: &sglang.GenerateStreamChunk{TokenIds: []uint32{9}},
	}}
	tests := []struct {
		name     string
		endErr   error
		wantCode codes.Code // the engine's status, relayed
		wantMsg  string
	}{
		// An Unavailable fault: the adapter's own word on a cut stream.
		{"stream ends without completion", nil, codes.OK, "before its completion"},
		{"engine status passes through", status.Error(codes.ResourceExhausted, "kv cache full"), codes.ResourceExhausted, "kv cache full"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eng := &sglangEngine{replies: []*sglang.GenerateResponse{partial}, endErr: tt.endErr}
			b := workers.NewSGLangBackend(testutil.Dial(t, eng.start(t)))
			s, err := b.Generate(testutil.Context(t, 5*time.Second), &workers.GenerateRequest{RequestID: "early"})
			if err != nil {
				t.Fatal(err)
			}
			if c, err := s.Recv(); err != nil || len(c.TokenIDs) != 1 {
				t.Fatalf("first Recv = %+v, %v; want the partial chunk", c, err)
			}
			for range 2 { // the error is sticky
				_, err = s.Recv()
				relayed := tt.wantCode != codes.OK && status.Code(err) == tt.wantCode
				cut := tt.wantCode == codes.OK && testutil.IsFault(err, fault.Unavailable)
				if !(relayed || cut) || !strings.Contains(err.Error(), tt.wantMsg) {
					t.Fatalf("Recv = %v; want code %v containing %q", err, tt.wantCode, tt.wantMsg)
				}
			}
		})
	}
}

func TestSGLangManagement(t *testing.T) {
	serverArgs, err := structpb.NewStruct(map[string]any{"page_size": 64, "model_path": "x"})
	if err != nil {
		t.Fatal(err)
	}
	eng := &sglangEngine{
		modelInfo: &sglang.GetModelInfoResponse{
			ModelPath: "/models/llama", ServedModelName: "llama-8b", VocabSize: 128256,
			MaxContextLength: 8192, EosTokenIds: []int32{128001, -1, 128009}, MaxReqInputLen: 8191,
		},
		serverInfo: &sglang.GetServerInfoResponse{ServerArgs: serverArgs, MaxTotalNumTokens: 500000},
		loads: &sglang.GetLoadsResponse{Loads: []*sglang.SchedulerLoad{
			{NumRunningReqs: 3, NumWaitingReqs: 1, NumUsedTokens: 100, MaxTotalNumTokens: 1000, TokenUsage: 0.1, CacheHitRate: 0.5},
			{NumRunningReqs: 2, NumWaitingReqs: 0, NumUsedTokens: 300, MaxTotalNumTokens: 1000, TokenUsage: 0.3, CacheHitRate: 0.7},
		}},
		health:    func(n int64) bool { return n != 2 },
		abortResp: &sglang.AbortResponse{Success: false, Message: "no such request"},
	}
	b := workers.NewSGLangBackend(testutil.Dial(t, eng.start(t)))
	ctx := testutil.Context(t, 5*time.Second)

	info, err := b.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantInfo := workers.ModelInfo{Model: "llama-8b", VocabSize: 128256, MaxContextLength: 8192, MaxInputTokens: 8191,
		EOSTokenIDs: []uint32{128001, 128009}, PageSize: 64, KVCapacityTokens: 500000}
	if !reflect.DeepEqual(info, wantInfo) {
		t.Errorf("Info = %+v, want %+v", info, wantInfo)
	}

	l, err := b.Loads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (workers.Load{Running: 5, Waiting: 1, UsedTokens: 400, MaxTotalTokens: 2000, TokenUsage: 0.2, CacheHitRate: 0.6}); !loadsClose(l, want) {
		t.Errorf("Loads = %+v, want %+v", l, want)
	}
	if inc := testutil.Locked(&eng.mu, func() []string { return eng.loadReqs[0].GetInclude() }); !reflect.DeepEqual(inc, []string{"core"}) {
		t.Errorf("GetLoads include = %v, want [core]", inc)
	}

	if err := b.Health(ctx); err != nil {
		t.Errorf("first Health = %v, want nil", err)
	}
	if err := b.Health(ctx); !errors.Is(err, workers.ErrUnhealthy) || !strings.Contains(err.Error(), "scheduler stalled") {
		t.Errorf("second Health = %v, want ErrUnhealthy with the engine's message", err)
	}

	if err := b.Abort(ctx, "r-1"); err == nil || !strings.Contains(err.Error(), "no such request") {
		t.Errorf("refused Abort = %v, want an error with the engine's message", err)
	}
	if got := testutil.Locked(&eng.mu, func() *sglang.AbortRequest { return eng.aborts[0] }); got.GetRequestId() != "r-1" || got.GetReason() == "" {
		t.Errorf("AbortRequest = %v, want request r-1 with a reason", got)
	}
}

// TestSGLangInfoWithAutoTruncate: an engine started with
// allow_auto_truncate truncates a prompt longer than its max_req_input_len
// instead of refusing it, and the router is told so beside the limits.
func TestSGLangInfoWithAutoTruncate(t *testing.T) {
	for _, truncate := range []bool{false, true} {
		serverArgs, err := structpb.NewStruct(map[string]any{"allow_auto_truncate": truncate})
		if err != nil {
			t.Fatal(err)
		}
		eng := &sglangEngine{
			modelInfo:  &sglang.GetModelInfoResponse{ModelPath: "/m", MaxContextLength: 8192, MaxReqInputLen: 1023},
			serverInfo: &sglang.GetServerInfoResponse{ServerArgs: serverArgs, MaxTotalNumTokens: 1024},
		}
		info, err := workers.NewSGLangBackend(testutil.Dial(t, eng.start(t))).Info(testutil.Context(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if info.TruncatesPrompts != truncate || info.MaxInputTokens != 1023 || info.MaxContextLength != 8192 {
			t.Errorf("allow_auto_truncate %v: TruncatesPrompts %v, MaxInputTokens %d, context %d; want %v, 1023 and 8192",
				truncate, info.TruncatesPrompts, info.MaxInputTokens, info.MaxContextLength, truncate)
		}
	}
}

func TestSGLangInfoWithoutServerInfo(t *testing.T) {
	eng := &sglangEngine{} // GetServerInfo unimplemented
	info, err := workers.NewSGLangBackend(testutil.Dial(t, eng.start(t))).Info(testutil.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if info.Model != "test/sglang-model" || info.PageSize != 0 || info.KVCapacityTokens != 0 {
		t.Errorf("Info = %+v; want the model path and unknown page size and capacity", info)
	}
}

func loadsClose(a, b workers.Load) bool {
	near := func(x, y float64) bool { return x-y < 1e-9 && y-x < 1e-9 }
	return a.Running == b.Running && a.Waiting == b.Waiting && a.UsedTokens == b.UsedTokens &&
		a.MaxTotalTokens == b.MaxTotalTokens && near(a.TokenUsage, b.TokenUsage) && near(a.CacheHitRate, b.CacheHitRate)
}

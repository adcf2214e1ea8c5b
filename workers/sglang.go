package workers

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/smgcommon"
)

// sglangBackend speaks sglang.grpc.scheduler.SglangScheduler.
type sglangBackend struct {
	c      sglang.SglangSchedulerClient
	conn   grpc.ClientConnInterface // for the KV event stream, decoded from its bytes
	prompt promptField              // GenerateRequest.tokenized.input_ids
}

// NewSGLangBackend returns the adapter for an SGLang engine reachable over conn.
// Errors from the engine are returned as the gRPC status errors they arrive as.
func NewSGLangBackend(conn grpc.ClientConnInterface) Backend {
	return &sglangBackend{c: sglang.NewSglangSchedulerClient(conn), conn: conn,
		prompt: newPromptField(&sglang.GenerateRequest{}, "tokenized", "input_ids")}
}

func (b *sglangBackend) Generate(ctx context.Context, req *GenerateRequest) (Stream, error) {
	sp := sglangSampling(&req.Sampling)
	if err := setSGLangConstraint(sp, req.Sampling.Constraint); err != nil {
		return nil, err
	}
	m := &sglang.GenerateRequest{
		RequestId:           req.RequestID,
		Tokenized:           &sglang.TokenizedInput{}, // its ids: b.prompt
		SamplingParams:      sp,
		DisaggregatedParams: sglangDisaggregated(req.Disaggregated),
		Stream:              !req.NoStream,
		DataParallelRank:    sglangGenerateRank(req.DPRank),
	}
	want := wantLogprobs(req.Logprobs)
	setSGLangLogprobs(m, want)
	in, err := b.c.Generate(ctx, m, b.prompt.withPrompt(req.InputIDs))
	if err != nil {
		return nil, err
	}
	return &engineStream[sglang.GenerateResponse]{
		in:        in,
		decode:    func(m *sglang.GenerateResponse) (Chunk, bool, error) { return decodeSGLang(m, want) },
		engine:    "sglang",
		requestID: req.RequestID,
	}, nil
}

// setSGLangLogprobs asks for want's log-probabilities: return_logprob (5)
// for output or prompt, top_logprobs_num (7) alternatives per position, and
// logprob_start_len (6), the first prompt position to report: 0 for the
// whole prompt, -1 for none (SGLang's default, "only output tokens"; see
// GenerateReqInput in sgl-project/sglang docs/references/sampling_params.md).
// SGLang always reports the output's with return_logprob; when only the
// prompt's were asked for, decodeSGLang drops them.
func setSGLangLogprobs(m *sglang.GenerateRequest, want *LogprobRequest) {
	if want == nil {
		return
	}
	m.ReturnLogprob = true
	m.TopLogprobsNum = int32(want.TopK)
	m.LogprobStartLen = -1
	if want.Prompt {
		m.LogprobStartLen = 0
	}
}

// sglangSampling spells out SGLang's defaults for every unset field, because
// the proto3 zero values (temperature 0, top_p 0, top_k 0) would mean greedy,
// nothing and "top 0" to the engine rather than "unset".
func sglangSampling(s *Sampling) *sglang.SamplingParams {
	p := &sglang.SamplingParams{
		Temperature:       orDefault(s.Temperature, 1.0),
		TopP:              orDefault(s.TopP, 1.0),
		TopK:              orDefault(s.TopK, -1),
		MinP:              orDefault(s.MinP, 0),
		FrequencyPenalty:  orDefault(s.FrequencyPenalty, 0),
		PresencePenalty:   orDefault(s.PresencePenalty, 0),
		RepetitionPenalty: orDefault(s.RepetitionPenalty, 1.0),
		MaxNewTokens:      s.MaxNewTokens,
		MinNewTokens:      s.MinNewTokens,
		StopTokenIds:      s.StopTokenIDs,
		IgnoreEos:         s.IgnoreEOS,
		N:                 1,
	}
	// Clients say "no top-k" with 0 as often as with -1; SGLang only
	// understands -1.
	if p.TopK == 0 {
		p.TopK = -1
	}
	// SGLang's gRPC SamplingParams has no field for the sampling seed;
	// it travels in custom_params as "sampling_seed", the name SGLang's
	// own sampling parameters use for it. An engine that ignores custom_params samples
	// unseeded: the request still succeeds, it is just not reproducible.
	if s.Seed != nil {
		p.CustomParams = &structpb.Struct{Fields: map[string]*structpb.Value{
			"sampling_seed": structpb.NewNumberValue(float64(*s.Seed)),
		}}
	}
	return p
}

// sglangDisaggregated is the bootstrap handoff both PD legs carry; nil for a
// regular request.
func sglangDisaggregated(h *Handoff) *sglang.DisaggregatedParams {
	if h == nil {
		return nil
	}
	return &sglang.DisaggregatedParams{
		BootstrapHost: h.BootstrapHost,
		BootstrapPort: int32(h.BootstrapPort),
		BootstrapRoom: h.Room,
	}
}

// decodeSGLang translates one message, with the log-probabilities want
// asked for.
func decodeSGLang(m *sglang.GenerateResponse, want *LogprobRequest) (Chunk, bool, error) {
	switch r := m.GetResponse().(type) {
	case *sglang.GenerateResponse_Chunk:
		return withLogprobs(chunkOf(r.Chunk), want, func() (out, prompt []Logprob, err error) {
			return sglangLogprobs(r.Chunk.GetOutputLogprobs(), r.Chunk.GetInputLogprobs(), "chunk")
		})
	case *sglang.GenerateResponse_Complete:
		var matched *uint32
		if ms, ok := r.Complete.GetMatchedStop().(*sglang.GenerateComplete_MatchedTokenId); ok {
			matched = &ms.MatchedTokenId
		}
		return withLogprobs(completionOf(r.Complete, matched), want, func() (out, prompt []Logprob, err error) {
			return sglangLogprobs(r.Complete.GetOutputLogprobs(), r.Complete.GetInputLogprobs(), "completion")
		})
	}
	return Chunk{}, false, nil
}

// sglangLogprobs decodes a message's output and input log-probabilities.
func sglangLogprobs(out *sglang.OutputLogProbs, in *sglang.InputLogProbs, where string) (output, prompt []Logprob, err error) {
	if output, err = outputLogprobs("sglang", where+" output_logprobs", out); err != nil {
		return nil, nil, err
	}
	prompt, err = inputLogprobs("sglang", where+" input_logprobs", in.GetTokenLogprobs(), in.GetTokenIds(), in.GetTopLogprobs(),
		func(v *sglang.InputTokenLogProb) (float32, bool) { return v.GetValue(), v != nil && v.Value != nil })
	return output, prompt, err
}

// Embed sends one tokenized input, on the data-parallel rank it names;
// SGLang's cross-encoder and multimodal fields stay unset.
func (b *sglangBackend) Embed(ctx context.Context, req *EmbedRequest) (*EmbedResult, error) {
	resp, err := b.c.Embed(ctx, &sglang.EmbedRequest{
		RequestId:        req.RequestID,
		Tokenized:        &sglang.TokenizedInput{InputIds: req.InputIDs},
		DataParallelRank: sglangRank(req.DPRank),
	})
	if err != nil {
		return nil, err
	}
	return embedResult("sglang", resp)
}

func (b *sglangBackend) Abort(ctx context.Context, requestID string) error {
	resp, err := b.c.Abort(ctx, &sglang.AbortRequest{RequestId: requestID, Reason: "aborted by kvgate"})
	if err != nil {
		return err
	}
	if !resp.GetSuccess() {
		return fmt.Errorf("sglang abort of request %q refused: %s", requestID, resp.GetMessage())
	}
	return nil
}

func (b *sglangBackend) Health(ctx context.Context) error {
	resp, err := b.c.HealthCheck(ctx, &sglang.HealthCheckRequest{})
	if err != nil {
		return err
	}
	return healthError(resp.GetHealthy(), resp.GetMessage())
}

func (b *sglangBackend) Loads(ctx context.Context) (Load, error) {
	resp, err := b.c.GetLoads(ctx, &sglang.GetLoadsRequest{Include: []string{"core"}})
	if err != nil {
		return Load{}, err
	}
	if len(resp.GetLoads()) == 0 && resp.GetAggregate() != nil {
		// An engine that only fills in the aggregate still tells us enough.
		a := resp.GetAggregate()
		return Load{
			Running:    int(a.GetTotalRunningReqs()),
			Waiting:    int(a.GetTotalWaitingReqs()),
			TokenUsage: a.GetAvgTokenUsage(),
		}, nil
	}
	return sumLoads(resp.GetLoads()), nil
}

// Info combines GetModelInfo with GetServerInfo, which carries the KV cache
// page size (in server_args, SGLang's command-line settings) and capacity. An
// engine without GetServerInfo still yields the model information; its page
// size and capacity are reported as unknown (0).
func (b *sglangBackend) Info(ctx context.Context) (ModelInfo, error) {
	mi, err := b.c.GetModelInfo(ctx, &sglang.GetModelInfoRequest{})
	if err != nil {
		return ModelInfo{}, err
	}
	info := ModelInfo{
		Model:            modelName(mi.GetServedModelName(), mi.GetModelPath()),
		VocabSize:        int(mi.GetVocabSize()),
		MaxContextLength: int(mi.GetMaxContextLength()),
		MaxInputTokens:   int(mi.GetMaxReqInputLen()),
		EOSTokenIDs:      tokenIDs(mi.GetEosTokenIds()),
	}
	si, err := b.c.GetServerInfo(ctx, &sglang.GetServerInfoRequest{})
	if status.Code(err) == codes.Unimplemented {
		return info, nil
	}
	if err != nil {
		return ModelInfo{}, err
	}
	if v, ok := si.GetServerArgs().GetFields()["page_size"]; ok {
		if n, ok := v.GetKind().(*structpb.Value_NumberValue); ok && n.NumberValue > 0 {
			info.PageSize = int(n.NumberValue)
		}
	}
	if v, ok := si.GetServerArgs().GetFields()["max_running_requests"]; ok {
		if n, ok := v.GetKind().(*structpb.Value_NumberValue); ok && n.NumberValue > 0 {
			info.MaxRunningRequests = int(n.NumberValue)
		}
	}
	if v, ok := si.GetServerArgs().GetFields()["disaggregation_bootstrap_port"]; ok {
		if n, ok := v.GetKind().(*structpb.Value_NumberValue); ok && n.NumberValue > 0 && n.NumberValue < 65536 {
			info.BootstrapPort = int(n.NumberValue)
		}
	}
	if v, ok := si.GetServerArgs().GetFields()["allow_auto_truncate"]; ok && v.GetBoolValue() {
		info.TruncatesPrompts = true
	}
	info.KVCapacityTokens = int(si.GetMaxTotalNumTokens())
	return info, nil
}

func (b *sglangBackend) Tokenizer(ctx context.Context) ([]byte, error) {
	st, err := b.c.GetTokenizer(ctx, &smgcommon.GetTokenizerRequest{})
	if err != nil {
		return nil, err
	}
	return readTokenizer(st)
}

// SubscribeKVEvents opens the scheduler's KV event stream (see
// KVEventSource); cancelling ctx closes it.
func (b *sglangBackend) SubscribeKVEvents(ctx context.Context, start uint64) (KVEventStream, error) {
	return openKVEvents(ctx, b.conn, sglang.SglangScheduler_SubscribeKvEvents_FullMethodName, start)
}

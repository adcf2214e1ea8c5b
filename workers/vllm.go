package workers

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/api/gen/vllm"
)

// vllmBackend speaks vllm.grpc.engine.VllmEngine.
type vllmBackend struct {
	c vllm.VllmEngineClient
}

// NewVLLMBackend returns the adapter for a vLLM engine reachable over conn.
// Errors from the engine are returned as the gRPC status errors they arrive as.
func NewVLLMBackend(conn grpc.ClientConnInterface) Backend {
	return &vllmBackend{c: vllm.NewVllmEngineClient(conn)}
}

func (b *vllmBackend) Generate(ctx context.Context, req *GenerateRequest) (Stream, error) {
	m := &vllm.GenerateRequest{
		RequestId:      req.RequestID,
		Input:          &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: req.InputIDs}},
		SamplingParams: vllmSampling(&req.Sampling),
		Stream:         !req.NoStream,
	}
	if req.DPRank != nil {
		m.DataParallelRank = proto.Int32(int32(*req.DPRank))
	}
	if req.KVTransferParamsJSON != "" {
		kv := req.KVTransferParamsJSON
		m.KvTransferParamsJson = &kv
	}
	in, err := b.c.Generate(ctx, m)
	if err != nil {
		return nil, err
	}
	return &engineStream[vllm.GenerateResponse]{
		in:        in,
		decode:    decodeVLLM,
		engine:    "vllm",
		requestID: req.RequestID,
	}, nil
}

// vllmSampling fills vLLM's SamplingParams. Its proto marks temperature, seed
// and max_tokens optional, so "unset" is sent as absent and the engine applies
// the model's defaults. top_p and repetition_penalty are plain floats whose
// zero would be taken literally, so their neutral values (1.0) are spelled out.
// top_k is unsigned with 0 meaning disabled, so SGLang's -1 maps to 0.
func vllmSampling(s *Sampling) *vllm.SamplingParams {
	p := &vllm.SamplingParams{
		Temperature:       s.Temperature,
		TopP:              orDefault(s.TopP, 1.0),
		MinP:              orDefault(s.MinP, 0),
		FrequencyPenalty:  orDefault(s.FrequencyPenalty, 0),
		PresencePenalty:   orDefault(s.PresencePenalty, 0),
		RepetitionPenalty: orDefault(s.RepetitionPenalty, 1.0),
		MaxTokens:         s.MaxNewTokens,
		MinTokens:         s.MinNewTokens,
		StopTokenIds:      s.StopTokenIDs,
		IgnoreEos:         s.IgnoreEOS,
		N:                 1,
		Seed:              s.Seed,
	}
	if k := orDefault(s.TopK, 0); k > 0 {
		p.TopK = uint32(k)
	}
	return p
}

func decodeVLLM(m *vllm.GenerateResponse) (Chunk, bool) {
	switch r := m.GetResponse().(type) {
	case *vllm.GenerateResponse_Chunk:
		return chunkOf(r.Chunk), true
	case *vllm.GenerateResponse_Complete:
		var matched *uint32
		if ms, ok := r.Complete.GetMatchedStop().(*vllm.GenerateComplete_MatchedTokenId); ok {
			matched = &ms.MatchedTokenId
		}
		c := completionOf(r.Complete, matched)
		c.Final.KVTransferParamsJSON = r.Complete.GetKvTransferParamsJson()
		return c, true
	}
	return Chunk{}, false
}

func (b *vllmBackend) Embed(ctx context.Context, req *EmbedRequest) (*EmbedResult, error) {
	resp, err := b.c.Embed(ctx, &vllm.EmbedRequest{
		RequestId: req.RequestID,
		Tokenized: &vllm.TokenizedInput{InputIds: req.InputIDs},
	})
	if err != nil {
		return nil, err
	}
	return embedResult("vllm", resp)
}

func (b *vllmBackend) Abort(ctx context.Context, requestID string) error {
	_, err := b.c.Abort(ctx, &vllm.AbortRequest{RequestIds: []string{requestID}})
	return err
}

func (b *vllmBackend) Health(ctx context.Context) error {
	resp, err := b.c.HealthCheck(ctx, &vllm.HealthCheckRequest{})
	if err != nil {
		return err
	}
	return healthError(resp.GetHealthy(), resp.GetMessage())
}

func (b *vllmBackend) Loads(ctx context.Context) (Load, error) {
	resp, err := b.c.GetLoads(ctx, &vllm.GetLoadsRequest{})
	if err != nil {
		return Load{}, err
	}
	return sumLoads(resp.GetLoads()), nil
}

// Info reads GetModelInfo. vLLM reports no page size (PageSize stays 0, so the
// router falls back to its configured block size); the KV capacity comes from
// GetLoads' max_total_num_tokens when the engine implements it.
func (b *vllmBackend) Info(ctx context.Context) (ModelInfo, error) {
	mi, err := b.c.GetModelInfo(ctx, &vllm.GetModelInfoRequest{})
	if err != nil {
		return ModelInfo{}, err
	}
	info := ModelInfo{
		Model:            modelName(mi.GetServedModelName(), mi.GetModelPath()),
		VocabSize:        int(mi.GetVocabSize()),
		MaxContextLength: int(mi.GetMaxContextLength()),
		EOSTokenIDs:      tokenIDs(mi.GetEosTokenIds()),
	}
	l, err := b.Loads(ctx)
	if status.Code(err) == codes.Unimplemented {
		return info, nil
	}
	if err != nil {
		return ModelInfo{}, err
	}
	info.KVCapacityTokens = l.MaxTotalTokens
	return info, nil
}

func (b *vllmBackend) Tokenizer(ctx context.Context) ([]byte, error) {
	st, err := b.c.GetTokenizer(ctx, &smgcommon.GetTokenizerRequest{})
	if err != nil {
		return nil, err
	}
	return readTokenizer(st)
}

// SubscribeKVEvents opens the engine's KV event stream (see KVEventSource);
// cancelling ctx closes it.
func (b *vllmBackend) SubscribeKVEvents(ctx context.Context, start uint64) (KVEventStream, error) {
	return openKVEvents(ctx, b.c.SubscribeKvEvents, start)
}

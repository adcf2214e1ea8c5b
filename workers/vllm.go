package workers

import (
	"context"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/api/gen/vllm"
)

// vllmBackend speaks vllm.grpc.engine.VllmEngine.
type vllmBackend struct {
	c      vllm.VllmEngineClient
	conn   grpc.ClientConnInterface // for the KV event stream, decoded from its bytes
	prompt promptField              // GenerateRequest.tokenized.input_ids
}

// NewVLLMBackend returns the adapter for a vLLM engine reachable over conn.
// Errors from the engine are returned as the gRPC status errors they arrive as.
func NewVLLMBackend(conn grpc.ClientConnInterface) Backend {
	return &vllmBackend{c: vllm.NewVllmEngineClient(conn), conn: conn,
		prompt: newPromptField(&vllm.GenerateRequest{}, "tokenized", "input_ids")}
}

func (b *vllmBackend) Generate(ctx context.Context, req *GenerateRequest) (Stream, error) {
	sp := vllmSampling(&req.Sampling)
	if err := setVLLMConstraint(sp, req.Sampling.Constraint); err != nil {
		return nil, err
	}
	want := wantLogprobs(req.Logprobs)
	setVLLMLogprobs(sp, want)
	m := &vllm.GenerateRequest{
		RequestId:      req.RequestID,
		Input:          &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{}}, // its ids: b.prompt
		SamplingParams: sp,
		Stream:         !req.NoStream,
	}
	if req.DPRank != nil {
		m.DataParallelRank = proto.Int32(int32(*req.DPRank))
	}
	if req.KVTransferParamsJSON != "" {
		kv := req.KVTransferParamsJSON
		m.KvTransferParamsJson = &kv
	}
	in, err := b.c.Generate(ctx, m, b.prompt.withPrompt(req.InputIDs))
	if err != nil {
		return nil, err
	}
	var d vllmDeltas
	return &engineStream[vllm.GenerateResponse]{
		in: in,
		decode: func(r *vllm.GenerateResponse) (Chunk, bool, error) {
			c, ok, err := decodeVLLM(r, want)
			if err == nil && ok && m.Stream {
				d.whole(&c)
			}
			return c, ok, err
		},
		engine:    "vllm",
		requestID: req.RequestID,
	}, nil
}

// vllmDeltas follows a streamed Generate so that its completion lists the
// whole output. SMG's vLLM servicer streams vLLM's delta output, and its
// completion repeats the last chunk (its ids, their count and
// log-probabilities) rather than listing everything, leaving the sum to the
// client; every other engine, and the neutral Completion, lists the whole
// output there.
type vllmDeltas struct {
	streamed, last []uint32
}

// whole records a chunk, or rewrites a completion that is the last chunk
// again, after more was streamed, into the whole output. Its
// log-probabilities are dropped: the chunks carried them.
func (d *vllmDeltas) whole(c *Chunk) {
	f := c.Final
	if f == nil {
		d.streamed = append(d.streamed, c.TokenIDs...)
		d.last = c.TokenIDs
		return
	}
	if len(f.OutputIDs) == 0 || len(f.OutputIDs) >= len(d.streamed) || !slices.Equal(f.OutputIDs, d.last) {
		return
	}
	f.OutputIDs = slices.Clone(d.streamed)
	f.CompletionTokens = uint32(len(d.streamed))
	c.CompletionTokens = f.CompletionTokens
	f.Logprobs = nil
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

// setVLLMLogprobs asks for want's log-probabilities. vLLM's logprobs (22)
// and prompt_logprobs (23) are each the number of alternatives per position;
// set, they ask for the log-probability of every output (prompt) token plus
// that many most likely alternatives, so 0 asks for the tokens' own only and
// unset asks for nothing.
func setVLLMLogprobs(p *vllm.SamplingParams, want *LogprobRequest) {
	if want == nil {
		return
	}
	k := int32(want.TopK)
	if want.Output {
		p.Logprobs = &k
	}
	if want.Prompt {
		p.PromptLogprobs = &k
	}
}

// decodeVLLM translates one message, with the log-probabilities want asked
// for.
func decodeVLLM(m *vllm.GenerateResponse, want *LogprobRequest) (Chunk, bool, error) {
	switch r := m.GetResponse().(type) {
	case *vllm.GenerateResponse_Chunk:
		return withLogprobs(chunkOf(r.Chunk), want, func() (out, prompt []Logprob, err error) {
			return vllmLogprobs(r.Chunk.GetOutputLogprobs(), r.Chunk.GetInputLogprobs(), "chunk")
		})
	case *vllm.GenerateResponse_Complete:
		var matched *uint32
		if ms, ok := r.Complete.GetMatchedStop().(*vllm.GenerateComplete_MatchedTokenId); ok {
			matched = &ms.MatchedTokenId
		}
		c := completionOf(r.Complete, matched)
		c.Final.KVTransferParamsJSON = r.Complete.GetKvTransferParamsJson()
		return withLogprobs(c, want, func() (out, prompt []Logprob, err error) {
			return vllmLogprobs(r.Complete.GetOutputLogprobs(), r.Complete.GetInputLogprobs(), "completion")
		})
	}
	return Chunk{}, false, nil
}

// vllmLogprobs decodes a message's output and input log-probabilities.
func vllmLogprobs(out *vllm.OutputLogProbs, in *vllm.InputLogProbs, where string) (output, prompt []Logprob, err error) {
	if output, err = outputLogprobs("vllm", where+" output_logprobs", out); err != nil {
		return nil, nil, err
	}
	prompt, err = inputLogprobs("vllm", where+" input_logprobs", in.GetTokenLogprobs(), in.GetTokenIds(), in.GetTopLogprobs(),
		func(v *vllm.InputTokenLogProb) (float32, bool) { return v.GetValue(), v != nil && v.Value != nil })
	return output, prompt, err
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

// Info reads GetModelInfo, and the page size from GetServerInfo's
// block_size (0, so the router falls back to its configured block size, from
// an engine that predates the field, has not chosen its block size yet, or
// lacks GetServerInfo); the KV capacity comes from GetLoads'
// max_total_num_tokens when the engine implements it.
func (b *vllmBackend) Info(ctx context.Context) (ModelInfo, error) {
	mi, err := b.c.GetModelInfo(ctx, &vllm.GetModelInfoRequest{})
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
	si, err := b.c.GetServerInfo(ctx, &vllm.GetServerInfoRequest{})
	switch {
	case err == nil:
		info.PageSize = int(si.GetBlockSize())
		info.MaxRunningRequests = int(si.GetMaxNumSeqs())
	case status.Code(err) != codes.Unimplemented:
		return ModelInfo{}, err
	}
	l, err := b.Loads(ctx)
	if status.Code(err) == codes.Unimplemented {
		return info, nil
	}
	if err != nil {
		return ModelInfo{}, err
	}
	info.KVCapacityTokens = l.MaxTotalTokens
	if l.MaxRunning > 0 {
		info.MaxRunningRequests = l.MaxRunning
	}
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
	return openKVEvents(ctx, b.conn, vllm.VllmEngine_SubscribeKvEvents_FullMethodName, start)
}

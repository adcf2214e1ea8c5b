package workers

import (
	"context"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/api/gen/trtllm"
	"github.com/kvgate/kvgate/fault"
)

// trtllmFallbackMaxTokens is the max_tokens sent for a request without
// max_new_tokens to an engine that reported no max_seq_len. TensorRT-LLM's
// protocol has no "up to the context length": the field is required, and
// the router must pick a bound.
const trtllmFallbackMaxTokens = 4096

// trtllmBackend speaks trtllm.TrtllmService, TensorRT-LLM's gRPC server.
//
// The protocol differs from SGLang's and vLLM's in ways that stop here:
// max_tokens is required (the backend remembers max_seq_len from Info to
// fill it in), sampling has no neutral-zero fields (everything optional),
// log-probabilities arrive one message per token rather than as parallel
// arrays, HealthCheck answers a status text, there is no GetLoads and no
// data-parallel rank, and prefill/decode disaggregation works differently
// from both others (kvgate does not drive it).
type trtllmBackend struct {
	c      trtllm.TrtllmServiceClient
	conn   grpc.ClientConnInterface // for the KV event stream, decoded from its bytes
	prompt promptField              // GenerateRequest.tokenized.input_token_ids

	// maxSeqLen is the engine's max_seq_len (prompt plus output) from the
	// last GetModelInfo; 0 until one reported it.
	maxSeqLen atomic.Int64
}

var _ KVEventSource = (*trtllmBackend)(nil)

// NewTRTLLMBackend returns the adapter for a TensorRT-LLM engine reachable
// over conn. Errors from the engine are returned as the gRPC status errors
// they arrive as.
func NewTRTLLMBackend(conn grpc.ClientConnInterface) Backend {
	return &trtllmBackend{c: trtllm.NewTrtllmServiceClient(conn), conn: conn,
		prompt: newPromptField(&trtllm.GenerateRequest{}, "tokenized", "input_token_ids")}
}

func (b *trtllmBackend) Generate(ctx context.Context, req *GenerateRequest) (Stream, error) {
	if err := trtllmRefuses(req); err != nil {
		return nil, err
	}
	m := &trtllm.GenerateRequest{
		RequestId:      req.RequestID,
		Tokenized:      &trtllm.TokenizedInput{}, // its ids: b.prompt
		SamplingConfig: trtllmSampling(&req.Sampling),
		// Without exclude_input_from_output the engine repeats the prompt
		// at the head of the output.
		OutputConfig: &trtllm.OutputConfig{ExcludeInputFromOutput: true},
		MaxTokens:    b.maxTokens(req),
		Streaming:    !req.NoStream,
		StopTokenIds: req.Sampling.StopTokenIDs,
		IgnoreEos:    req.Sampling.IgnoreEOS,
		// Keep a matched stop token in the output, as SGLang and vLLM do:
		// the router's stop handling and usage counts expect it.
		IncludeStopTokenInOutput: true,
	}
	g, err := trtllmConstraint(req.Sampling.Constraint)
	if err != nil {
		return nil, err
	}
	m.GuidedDecoding = g
	want := wantLogprobs(req.Logprobs)
	if want != nil {
		k := int32(want.TopK)
		if want.Output {
			m.OutputConfig.Logprobs = &k
		}
		if want.Prompt {
			m.OutputConfig.PromptLogprobs = &k
		}
	}
	in, err := b.c.Generate(ctx, m, b.prompt.withPrompt(req.InputIDs))
	if err != nil {
		return nil, err
	}
	prompt := req.InputIDs
	return &engineStream[trtllm.GenerateResponse]{
		in:        in,
		decode:    func(m *trtllm.GenerateResponse) (Chunk, bool, error) { return decodeTRTLLM(m, want, prompt) },
		engine:    "trtllm",
		requestID: req.RequestID,
	}, nil
}

// trtllmRefuses names what a request asks that this adapter cannot send: a
// data-parallel rank (the protocol has none) or a prefill/decode leg of
// SGLang's or vLLM's kind. Both are router bugs, since the router never
// builds them for a TensorRT-LLM worker; a Precondition fault says so before
// anything reaches the engine.
func trtllmRefuses(req *GenerateRequest) error {
	switch {
	case req.DPRank != nil:
		return fault.Newf(fault.Precondition, "trtllm engines have no data_parallel_rank: a TensorRT-LLM worker cannot be a rank target")
	case req.Disaggregated != nil || req.KVTransferParamsJSON != "":
		return fault.Newf(fault.Precondition, "prefill/decode disaggregation is not supported for trtllm workers")
	}
	return nil
}

// maxTokens is max_tokens for req: its max_new_tokens, else what the
// context leaves after the prompt, else trtllmFallbackMaxTokens.
func (b *trtllmBackend) maxTokens(req *GenerateRequest) uint32 {
	if n := req.Sampling.MaxNewTokens; n != nil {
		return *n
	}
	if seq := b.maxSeqLen.Load(); seq > 0 {
		return uint32(max(seq-int64(len(req.InputIDs)), 1))
	}
	return trtllmFallbackMaxTokens
}

// trtllmSampling fills TensorRT-LLM's SamplingConfig. Every field is
// optional there, so "unset" is sent as absent and the engine applies its
// defaults; one beam and one sequence are spelled out. top_k 0 disables
// top-k, so SGLang's -1 maps to 0.
func trtllmSampling(s *Sampling) *trtllm.SamplingConfig {
	p := &trtllm.SamplingConfig{
		BeamWidth:          1,
		NumReturnSequences: 1,
		Temperature:        s.Temperature,
		TopP:               s.TopP,
		MinP:               s.MinP,
		FrequencyPenalty:   s.FrequencyPenalty,
		PresencePenalty:    s.PresencePenalty,
		RepetitionPenalty:  s.RepetitionPenalty,
	}
	if s.TopK != nil {
		p.TopK = proto.Int32(max(*s.TopK, 0))
	}
	if s.MinNewTokens > 0 {
		p.MinTokens = proto.Uint32(s.MinNewTokens)
	}
	if s.Seed != nil {
		p.Seed = proto.Uint64(uint64(int64(*s.Seed)))
	}
	return p
}

// trtllmConstraint is c as guided_decoding (11): JSON schema, regex, EBNF
// grammar or structural tag; nil for no constraint.
func trtllmConstraint(c Constraint) (*trtllm.GuidedDecodingParams, error) {
	var t trtllm.GuidedDecodingParams_GuideType
	switch c.Kind {
	case NoConstraint:
		return nil, nil
	case JSONSchema:
		t = trtllm.GuidedDecodingParams_GUIDE_TYPE_JSON_SCHEMA
	case Regex:
		t = trtllm.GuidedDecodingParams_GUIDE_TYPE_REGEX
	case EBNF:
		t = trtllm.GuidedDecodingParams_GUIDE_TYPE_EBNF_GRAMMAR
	case StructuralTag:
		t = trtllm.GuidedDecodingParams_GUIDE_TYPE_STRUCTURAL_TAG
	default:
		return nil, errConstraintKind(c.Kind)
	}
	return &trtllm.GuidedDecodingParams{GuideType: t, Guide: c.Value}, nil
}

// decodeTRTLLM translates one message, with the log-probabilities want
// asked for; prompt is the prompt, which the prompt's log-probabilities are
// matched against.
func decodeTRTLLM(m *trtllm.GenerateResponse, want *LogprobRequest, prompt []uint32) (Chunk, bool, error) {
	switch r := m.GetResponse().(type) {
	case *trtllm.GenerateResponse_Chunk:
		c := chunkOf(r.Chunk)
		return withLogprobs(c, want, func() (out, _ []Logprob, err error) {
			out, err = trtllmLogprobs("chunk logprobs", r.Chunk.GetLogprobs())
			if err == nil && out != nil && len(out) != len(c.TokenIDs) {
				err = malformedLogprobs("trtllm", "chunk logprobs", "%d entries for %d tokens", len(out), len(c.TokenIDs))
			}
			return out, nil, err
		})
	case *trtllm.GenerateResponse_Complete:
		var matched *uint32
		if ms, ok := r.Complete.GetMatchedStop().(*trtllm.GenerateComplete_MatchedTokenId); ok {
			matched = &ms.MatchedTokenId
		}
		finish, err := trtllmFinish(r.Complete.GetFinishReason(), m.GetRequestId())
		if err != nil {
			return Chunk{}, false, err
		}
		c := completionOf(trtllmComplete{r.Complete, finish}, matched)
		return withLogprobs(c, want, func() (out, in []Logprob, err error) {
			if out, err = trtllmLogprobs("completion logprobs", r.Complete.GetLogprobs()); err != nil {
				return nil, nil, err
			}
			in, err = trtllmPromptLogprobs(r.Complete.GetPromptLogprobs(), prompt)
			return out, in, err
		})
	}
	return Chunk{}, false, nil
}

// trtllmComplete reads a GenerateComplete through the names completionOf
// expects, with its finish reason already in the router's terms (see
// trtllmFinish).
type trtllmComplete struct {
	*trtllm.GenerateComplete
	finish string
}

func (c trtllmComplete) GetOutputIds() []uint32  { return c.GetOutputTokenIds() }
func (c trtllmComplete) GetFinishReason() string { return c.finish }

// trtllmFinish is TensorRT-LLM's finish reason in the router's terms:
// "stop_word" (a matched stop string or token) is "stop"; "cancelled" and
// "timeout" (the engine gave up on the request) are "abort". "error" is
// TensorRT-LLM's servicer failing a request that produced no output: the
// worker's failure, an Unavailable fault so that the request is retried elsewhere
// and the breaker counts it. Anything else passes through.
func trtllmFinish(reason, requestID string) (string, error) {
	switch strings.ToLower(reason) {
	case "stop_word", "end_id":
		return "stop", nil
	case "cancelled", "canceled", "aborted", "timeout":
		return "abort", nil
	case "error":
		return "", fault.Newf(fault.Unavailable, "trtllm engine failed request %q (finish_reason %q)", requestID, reason)
	}
	return reason, nil
}

// trtllmLogprobs decodes a list of TokenLogprob; nil when empty. A value
// that is not a number is a Corrupt fault, as for the other engines.
func trtllmLogprobs(where string, in []*trtllm.TokenLogprob) ([]Logprob, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]Logprob, len(in))
	for i, t := range in {
		if isNaN32(t.GetLogprob()) {
			return nil, malformedLogprobs("trtllm", where, "token %d has log-probability NaN", i)
		}
		out[i] = Logprob{TokenID: t.GetTokenId(), Value: t.GetLogprob()}
		if len(t.GetTopLogprobs()) == 0 {
			continue
		}
		out[i].Top = make([]TopLogprob, len(t.GetTopLogprobs()))
		for j, a := range t.GetTopLogprobs() {
			if isNaN32(a.GetLogprob()) {
				return nil, malformedLogprobs("trtllm", where, "token %d's alternative %d has log-probability NaN", i, j)
			}
			out[i].Top[j] = TopLogprob{TokenID: a.GetTokenId(), Value: a.GetLogprob()}
		}
	}
	return out, nil
}

// trtllmPromptLogprobs decodes the prompt's log-probabilities: one per
// prompt token, or one per token after the first (which has none, and is
// reported Missing). Any other count cannot be matched to the prompt.
func trtllmPromptLogprobs(in []*trtllm.TokenLogprob, prompt []uint32) ([]Logprob, error) {
	lps, err := trtllmLogprobs("prompt_logprobs", in)
	if err != nil || lps == nil {
		return nil, err
	}
	switch len(lps) {
	case len(prompt):
		return lps, nil
	case len(prompt) - 1:
		return append([]Logprob{{TokenID: prompt[0], Missing: true}}, lps...), nil
	}
	return nil, malformedLogprobs("trtllm", "prompt_logprobs", "%d entries for a prompt of %d tokens", len(lps), len(prompt))
}

func isNaN32(v float32) bool { return v != v }

// trtllmEmbedding reads an EmbedResponse, which states no dimension.
type trtllmEmbedding struct{ *trtllm.EmbedResponse }

func (trtllmEmbedding) GetEmbeddingDim() uint32 { return 0 }

func (b *trtllmBackend) Embed(ctx context.Context, req *EmbedRequest) (*EmbedResult, error) {
	if req.DPRank != nil {
		return nil, fault.Newf(fault.Precondition, "trtllm engines have no data_parallel_rank: a TensorRT-LLM worker cannot be a rank target")
	}
	resp, err := b.c.Embed(ctx, &trtllm.EmbedRequest{
		RequestId: req.RequestID,
		Tokenized: &trtllm.TokenizedInput{InputTokenIds: req.InputIDs},
	})
	if err != nil {
		return nil, err
	}
	return embedResult("trtllm", trtllmEmbedding{resp})
}

// Abort asks the engine to end requestID. success=false means the engine
// no longer knows the id (it finished, or never started), which is what
// an abort wants, so only a transport or status error is returned.
func (b *trtllmBackend) Abort(ctx context.Context, requestID string) error {
	_, err := b.c.Abort(ctx, &trtllm.AbortRequest{RequestId: requestID})
	return err
}

// Health reads HealthCheck's status text: "OK" (in any case) is healthy,
// anything else is the engine's description of what is wrong.
func (b *trtllmBackend) Health(ctx context.Context) error {
	resp, err := b.c.HealthCheck(ctx, &trtllm.HealthCheckRequest{})
	if err != nil {
		return err
	}
	s := strings.TrimSpace(resp.GetStatus())
	if strings.EqualFold(s, "ok") {
		return nil
	}
	if s == "" {
		s = "HealthCheck answered an empty status"
	}
	return healthError(false, s)
}

// errTRTLLMNoLoads is Loads' answer: the protocol has no GetLoads. It is
// Unsupported, which Lacks reads as an engine's UNIMPLEMENTED, so callers
// treat both alike, and it costs no call.
var errTRTLLMNoLoads = fault.Newf(fault.Unsupported, "trtllm.TrtllmService has no GetLoads: the router counts the load it sends")

func (b *trtllmBackend) Loads(context.Context) (Load, error) {
	return Load{}, errTRTLLMNoLoads
}

// Info reads GetModelInfo. max_seq_len (prompt plus output) is the context
// length. The protocol reports no end-of-sequence ids, page size or KV
// capacity: those stay 0 and the router uses the tokenizer's ids and its
// configured block size.
func (b *trtllmBackend) Info(ctx context.Context) (ModelInfo, error) {
	mi, err := b.c.GetModelInfo(ctx, &trtllm.GetModelInfoRequest{})
	if err != nil {
		return ModelInfo{}, err
	}
	if n := mi.GetMaxSeqLen(); n > 0 {
		b.maxSeqLen.Store(int64(n))
	}
	// max_input_len is the longest prompt the engine accepts, and
	// max_batch_size the requests it runs at once: the limits a prompt is
	// placed by and the saturation judged against.
	return ModelInfo{
		Model:              mi.GetModelId(),
		VocabSize:          int(mi.GetVocabSize()),
		MaxContextLength:   int(mi.GetMaxSeqLen()),
		MaxInputTokens:     int(mi.GetMaxInputLen()),
		MaxRunningRequests: int(mi.GetMaxBatchSize()),
	}, nil
}

func (b *trtllmBackend) Tokenizer(ctx context.Context) ([]byte, error) {
	st, err := b.c.GetTokenizer(ctx, &smgcommon.GetTokenizerRequest{})
	if err != nil {
		return nil, err
	}
	return readTokenizer(st)
}

// SubscribeKVEvents opens the engine's KV event stream (see KVEventSource);
// cancelling ctx closes it.
func (b *trtllmBackend) SubscribeKVEvents(ctx context.Context, start uint64) (KVEventStream, error) {
	return openKVEvents(ctx, b.conn, trtllm.TrtllmService_SubscribeKvEvents_FullMethodName, start)
}

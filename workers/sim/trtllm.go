package sim

import (
	"context"
	"math"

	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/api/gen/trtllm"
)

// trtllmServer translates TensorRT-LLM's TrtllmService to the engine. It
// keeps that protocol's shape where it differs from the others: max_tokens
// is required, chunks carry only new tokens, the completion repeats every
// output log-probability and brings the prompt's, leaving out the first
// prompt token (which has none), a matched stop token is left out of a
// non-streamed output unless include_stop_token_in_output asks for it,
// HealthCheck answers a status text, and there is no GetLoads. (A streamed
// stop token is kept: the simulator sends each token before it knows the
// token ends the request.)
type trtllmServer struct {
	trtllm.UnimplementedTrtllmServiceServer
	e *Engine
}

func registerTRTLLM(s grpc.ServiceRegistrar, e *Engine) {
	trtllm.RegisterTrtllmServiceServer(s, &trtllmServer{e: e})
}

func (s *trtllmServer) Generate(req *trtllm.GenerateRequest, stream trtllm.TrtllmService_GenerateServer) error {
	r, err := s.request(req)
	if err != nil {
		return err
	}
	rank, err := s.e.forRank(0, false)
	if err != nil {
		return err
	}
	keepStop := req.GetIncludeStopTokenInOutput() || req.GetStreaming()
	// The prompt's log-probabilities go with the completion, and so do the
	// output's, all of them, streamed or not (TensorRT-LLM's servicer reads
	// both from the finished result).
	var promptLps, outLps []tokenLogprob
	return rank.generate(stream.Context(), r, func(o output) error {
		if o.promptLogprobs != nil {
			promptLps = o.promptLogprobs
		}
		outLps = append(outLps, o.logprobs...)
		resp := &trtllm.GenerateResponse{RequestId: r.id}
		if o.final == nil {
			resp.Response = &trtllm.GenerateResponse_Chunk{Chunk: &trtllm.GenerateStreamChunk{
				TokenIds: o.tokens, PromptTokens: o.promptTokens, CompletionTokens: o.completionTokens, CachedTokens: o.cachedToks,
				Logprobs: trtllmLogprobs(o.logprobs),
			}}
			return stream.Send(resp)
		}
		out, lps := o.final.outputIDs, outLps
		c := &trtllm.GenerateComplete{
			FinishReason: o.final.finishReason,
			PromptTokens: o.promptTokens, CompletionTokens: o.completionTokens, CachedTokens: o.cachedToks,
			PromptLogprobs: trtllmLogprobs(promptLps),
		}
		if m := o.final.matched; m != nil {
			c.FinishReason = "stop_word"
			c.MatchedStop = &trtllm.GenerateComplete_MatchedTokenId{MatchedTokenId: *m}
			if !keepStop && len(out) > 0 && out[len(out)-1] == *m {
				out = out[:len(out)-1]
				if len(lps) > len(out) {
					lps = lps[:len(out)]
				}
			}
		}
		if o.final.finishReason == "abort" {
			c.FinishReason = "cancelled"
		}
		c.OutputTokenIds, c.Logprobs = out, trtllmLogprobs(lps)
		resp.Response = &trtllm.GenerateResponse_Complete{Complete: c}
		return stream.Send(resp)
	})
}

// request validates req as TensorRT-LLM would and builds the engine's
// request. temperature 0 means greedy (seed ignored).
func (s *trtllmServer) request(req *trtllm.GenerateRequest) (*request, error) {
	e := s.e
	switch {
	case req.GetMultimodalInput() != nil:
		return nil, e.invalid("multimodal input is not supported")
	case len(req.GetStop()) > 0 || len(req.GetBad()) > 0:
		return nil, e.invalid("stop and bad strings are not supported: the simulator tokenizes nothing; send stop_token_ids")
	case req.GetDisaggregatedParams().GetRequestType() != trtllm.DisaggregatedParams_REQUEST_TYPE_CONTEXT_AND_GENERATION:
		return nil, e.invalid("disaggregated_params.request_type %v is not simulated", req.GetDisaggregatedParams().GetRequestType())
	case req.GetMaxTokens() < 1:
		return nil, e.invalid("max_tokens must be at least 1, got %d", req.GetMaxTokens())
	}
	sc := req.GetSamplingConfig()
	if sc == nil {
		sc = &trtllm.SamplingConfig{}
	}
	if sc.GetBeamWidth() > 1 || sc.GetNumReturnSequences() > 1 {
		return nil, e.invalid("beam_width %d, num_return_sequences %d: the simulator generates one sequence per request", sc.GetBeamWidth(), sc.GetNumReturnSequences())
	}
	prompt := req.GetTokenized().GetInputTokenIds()
	maxNew := int(req.GetMaxTokens())
	if int(sc.GetMinTokens()) > maxNew {
		return nil, e.invalid("min_tokens (%d) must be <= max_tokens (%d)", sc.GetMinTokens(), maxNew)
	}
	if err := e.checkPrompt(prompt, maxNew); err != nil {
		return nil, err
	}
	lp, err := s.logprobs(req.GetOutputConfig())
	if err != nil {
		return nil, err
	}
	greedy := sc.Temperature != nil && sc.GetTemperature() == 0
	sample := e.newSampler(prompt, sc.GetSeed(), greedy, int(sc.GetMinTokens()), req.GetIgnoreEos(), req.GetStopTokenIds())
	switch g := req.GetGuidedDecoding(); g.GetGuideType() {
	case trtllm.GuidedDecodingParams_GUIDE_TYPE_JSON_SCHEMA:
		sample.script, err = e.schemaAnswer(g.GetGuide())
	case trtllm.GuidedDecodingParams_GUIDE_TYPE_JSON:
		sample.script, err = e.encodeAnswer("{}")
	}
	if err != nil {
		return nil, err
	}
	return &request{
		id:     req.GetRequestId(),
		prompt: prompt,
		maxNew: maxNew,
		stream: req.GetStreaming(),
		sample: sample,
		lp:     lp,
	}, nil
}

// logprobs reads what oc asks for: logprobs set, every output token's with
// that many alternatives; prompt_logprobs set, the prompt's likewise.
func (s *trtllmServer) logprobs(oc *trtllm.OutputConfig) (logprobSpec, error) {
	var lp logprobSpec
	if oc == nil {
		return lp, nil
	}
	if oc.Logprobs != nil {
		lp.output, lp.outputTopK = true, int(oc.GetLogprobs())
		if err := s.e.checkTopK("logprobs", lp.outputTopK); err != nil {
			return lp, err
		}
	}
	if oc.PromptLogprobs != nil {
		lp.prompt, lp.promptTopK = true, int(oc.GetPromptLogprobs())
		if err := s.e.checkTopK("prompt_logprobs", lp.promptTopK); err != nil {
			return lp, err
		}
	}
	return lp, nil
}

// trtllmLogprobs is lps as TensorRT-LLM's one message per token, leaving
// out a token without a log-probability (the prompt's first); nil for
// none.
func trtllmLogprobs(lps []tokenLogprob) []*trtllm.TokenLogprob {
	var out []*trtllm.TokenLogprob
	for _, lp := range lps {
		if lp.missing {
			continue
		}
		t := &trtllm.TokenLogprob{TokenId: lp.id, Logprob: lp.value}
		for _, a := range lp.top {
			t.TopLogprobs = append(t.TopLogprobs, &trtllm.TopLogprob{TokenId: a.id, Logprob: a.value})
		}
		out = append(out, t)
	}
	return out
}

// Embed serves TensorRT-LLM's Embed, whose answer states no dimension: the
// GarbageStream fault, which elsewhere makes the stated dimension
// contradict the vector, puts a NaN in it instead.
func (s *trtllmServer) Embed(ctx context.Context, req *trtllm.EmbedRequest) (*trtllm.EmbedResponse, error) {
	ids := req.GetTokenized().GetInputTokenIds()
	vec, dim, err := s.e.embed(ctx, ids)
	if err != nil {
		return nil, err
	}
	if int(dim) != len(vec) {
		vec[0] = float32(math.NaN())
	}
	return &trtllm.EmbedResponse{RequestId: req.GetRequestId(), Embedding: vec, PromptTokens: uint32(len(ids))}, nil
}

func (s *trtllmServer) HealthCheck(context.Context, *trtllm.HealthCheckRequest) (*trtllm.HealthCheckResponse, error) {
	if s.e.Faults().Unhealthy {
		return &trtllm.HealthCheckResponse{Status: "sim: injected fault: unhealthy"}, nil
	}
	return &trtllm.HealthCheckResponse{Status: "OK"}, nil
}

// Abort ends the request if it is waiting or running; success says whether
// it was.
func (s *trtllmServer) Abort(_ context.Context, req *trtllm.AbortRequest) (*trtllm.AbortResponse, error) {
	if s.e.abort(req.GetRequestId()) > 0 {
		return &trtllm.AbortResponse{Success: true, Message: "aborted"}, nil
	}
	return &trtllm.AbortResponse{Success: false, Message: "no such request waiting or running"}, nil
}

func (s *trtllmServer) GetModelInfo(context.Context, *trtllm.GetModelInfoRequest) (*trtllm.GetModelInfoResponse, error) {
	c := s.e.cfg
	return &trtllm.GetModelInfoResponse{
		ModelId:           c.Model,
		MaxInputLen:       int32(c.MaxContextLength - 1),
		MaxSeqLen:         int32(c.MaxContextLength),
		MaxBatchSize:      int32(c.MaxRunning),
		VocabSize:         int32(c.VocabSize),
		HiddenSize:        4096,
		NumLayers:         32,
		NumHeads:          32,
		SupportedFeatures: []string{"guided_decoding"},
	}, nil
}

func (s *trtllmServer) GetServerInfo(context.Context, *trtllm.GetServerInfoRequest) (*trtllm.GetServerInfoResponse, error) {
	return &trtllm.GetServerInfoResponse{
		Version:              "kvgate-sim",
		Backend:              "pytorch",
		TensorParallelSize:   1,
		PipelineParallelSize: 1,
		ContextParallelSize:  1,
		WorldSize:            1,
	}, nil
}

func (s *trtllmServer) SubscribeKvEvents(req *smgcommon.SubscribeKvEventsRequest, stream trtllm.TrtllmService_SubscribeKvEventsServer) error {
	return s.e.subscribeKvEvents(stream.Context(), req.GetStartSequenceNumber(), s.e.streamSend(stream.Send))
}

func (s *trtllmServer) GetTokenizer(_ *smgcommon.GetTokenizerRequest, stream grpc.ServerStreamingServer[smgcommon.GetTokenizerChunk]) error {
	return s.e.getTokenizer(stream)
}

package sim

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/api/gen/vllm"
)

// vllmServer translates vLLM's VllmEngine service to the engine; Embed is in
// embed.go.
type vllmServer struct {
	vllm.UnimplementedVllmEngineServer
	e *Engine
}

func (s *vllmServer) Generate(req *vllm.GenerateRequest, stream vllm.VllmEngine_GenerateServer) error {
	r, err := s.request(req)
	if err != nil {
		return err
	}
	rank, err := s.e.forRank(req.GetDataParallelRank(), req.DataParallelRank != nil)
	if err != nil {
		return err
	}
	var last output // the latest chunk, which a delta completion repeats
	return rank.generate(stream.Context(), r, func(o output) error {
		resp := &vllm.GenerateResponse{}
		if o.final == nil {
			last = o
			resp.Response = &vllm.GenerateResponse_Chunk{Chunk: &vllm.GenerateStreamChunk{
				TokenIds: o.tokens, PromptTokens: o.promptTokens, CompletionTokens: o.completionTokens, CachedTokens: o.cachedToks,
				OutputLogprobs: vllmOutputLogprobs(o.logprobs), InputLogprobs: vllmInputLogprobs(o.promptLogprobs),
			}}
		} else {
			c := &vllm.GenerateComplete{
				OutputIds: o.final.outputIDs, FinishReason: o.final.finishReason,
				PromptTokens: o.promptTokens, CompletionTokens: o.completionTokens, CachedTokens: o.cachedToks,
				OutputLogprobs: vllmOutputLogprobs(o.logprobs), InputLogprobs: vllmInputLogprobs(o.promptLogprobs),
			}
			c.SpecAcceptedTokens, c.SpecDraftTokens = s.e.speculative(o.completionTokens)
			if req.GetStream() && s.e.Faults().CompletionRepeatsLastChunk {
				c.OutputIds, c.CompletionTokens = last.tokens, uint32(len(last.tokens))
				c.OutputLogprobs = vllmOutputLogprobs(last.logprobs)
			}
			if o.final.matched != nil {
				c.MatchedStop = &vllm.GenerateComplete_MatchedTokenId{MatchedTokenId: *o.final.matched}
			}
			if o.final.kvTransferJSON != "" {
				c.KvTransferParamsJson = &o.final.kvTransferJSON
			}
			resp.Response = &vllm.GenerateResponse_Complete{Complete: c}
		}
		return stream.Send(resp)
	})
}

// request validates req as vLLM would and builds the engine's request. An
// unset max_tokens means "up to the context length", as in vLLM; an unset
// temperature means 1.0 and temperature 0 means greedy (seed ignored).
func (s *vllmServer) request(req *vllm.GenerateRequest) (*request, error) {
	e := s.e
	if _, isText := req.GetInput().(*vllm.GenerateRequest_Text); isText {
		return nil, e.invalid("text input is not supported: the simulator has no tokenizer; send tokenized input")
	}
	if req.GetMmInputs() != nil {
		return nil, e.invalid("multimodal input is not supported")
	}
	sp := req.GetSamplingParams()
	if sp == nil {
		sp = &vllm.SamplingParams{}
	}
	if sp.GetN() > 1 {
		return nil, e.invalid("n = %d: the simulator generates one sequence per request", sp.GetN())
	}
	leg, err := e.vllmLeg(req.KvTransferParamsJson, sp.MaxTokens)
	if err != nil {
		return nil, err
	}
	prompt := req.GetTokenized().GetInputIds()
	maxNew := e.cfg.MaxContextLength - len(prompt)
	if leg != nil && leg.prefill {
		maxNew = 1
	}
	if sp.MaxTokens != nil {
		maxNew = int(sp.GetMaxTokens())
		if maxNew < 1 {
			return nil, e.invalid("max_tokens must be at least 1, got %d", maxNew)
		}
	}
	if len(prompt) >= e.cfg.MaxContextLength {
		return nil, e.invalid("prompt (%d tokens) leaves no room in the context length %d", len(prompt), e.cfg.MaxContextLength)
	}
	if int(sp.GetMinTokens()) > maxNew {
		return nil, e.invalid("min_tokens (%d) must be <= max_tokens (%d)", sp.GetMinTokens(), maxNew)
	}
	if err := e.checkPrompt(prompt, maxNew); err != nil {
		return nil, err
	}
	var seed uint64
	if sp.Seed != nil {
		if e.Faults().RefuseSeed {
			return nil, status.Errorf(codes.Internal, "sim: engine core failed: a seeded request (seed %d) on a CPU random generator, which has no offset", sp.GetSeed())
		}
		seed = uint64(int64(sp.GetSeed()))
	}
	greedy := sp.Temperature != nil && sp.GetTemperature() == 0
	lp, err := s.logprobs(sp)
	if err != nil {
		return nil, err
	}
	sample := e.newSampler(prompt, seed, greedy, int(sp.GetMinTokens()), sp.GetIgnoreEos(), sp.GetStopTokenIds())
	switch c := sp.GetConstraint().(type) {
	case *vllm.SamplingParams_JsonSchema:
		sample.script, err = e.schemaAnswer(c.JsonSchema)
	case *vllm.SamplingParams_JsonObject:
		if c.JsonObject {
			sample.script, err = e.encodeAnswer("{}")
		}
	}
	if err != nil {
		return nil, err
	}
	return &request{
		id:     req.GetRequestId(),
		prompt: prompt,
		maxNew: maxNew,
		stream: req.GetStream(),
		sample: sample,
		pd:     leg,
		lp:     lp,
	}, nil
}

// logprobs reads what sp asks for: logprobs set, every output token's with
// that many alternatives; prompt_logprobs set, the prompt's likewise.
func (s *vllmServer) logprobs(sp *vllm.SamplingParams) (logprobSpec, error) {
	var lp logprobSpec
	if sp.Logprobs != nil {
		lp.output, lp.outputTopK = true, int(sp.GetLogprobs())
		if err := s.e.checkTopK("logprobs", lp.outputTopK); err != nil {
			return lp, err
		}
	}
	if sp.PromptLogprobs != nil {
		lp.prompt, lp.promptTopK = true, int(sp.GetPromptLogprobs())
		if err := s.e.checkTopK("prompt_logprobs", lp.promptTopK); err != nil {
			return lp, err
		}
	}
	return lp, nil
}

// vllmOutputLogprobs is lps in vLLM's parallel arrays; nil for none.
func vllmOutputLogprobs(lps []tokenLogprob) *vllm.OutputLogProbs {
	if len(lps) == 0 {
		return nil
	}
	return &vllm.OutputLogProbs{TokenLogprobs: lpValues(lps), TokenIds: lpIDs(lps), TopLogprobs: lpTops(lps, vllmTop)}
}

// vllmInputLogprobs is lps as vLLM's prompt log-probabilities; nil for none.
func vllmInputLogprobs(lps []tokenLogprob) *vllm.InputLogProbs {
	if len(lps) == 0 {
		return nil
	}
	return &vllm.InputLogProbs{TokenIds: lpIDs(lps), TopLogprobs: lpTops(lps, vllmTop),
		TokenLogprobs: lpWrapped(lps, func(v *float32) *vllm.InputTokenLogProb { return &vllm.InputTokenLogProb{Value: v} })}
}

func vllmTop(values []float32, ids []uint32) *vllm.TopLogProbs {
	return &vllm.TopLogProbs{Values: values, TokenIds: ids}
}

func (s *vllmServer) HealthCheck(context.Context, *vllm.HealthCheckRequest) (*vllm.HealthCheckResponse, error) {
	if s.e.Faults().Unhealthy {
		return &vllm.HealthCheckResponse{Healthy: false, Message: "sim: injected fault: unhealthy"}, nil
	}
	return &vllm.HealthCheckResponse{Healthy: true, Message: "ok"}, nil
}

// Abort ends every listed request that is waiting or running; unknown ids
// are ignored, as in vLLM.
func (s *vllmServer) Abort(_ context.Context, req *vllm.AbortRequest) (*vllm.AbortResponse, error) {
	s.e.abort(req.GetRequestIds()...)
	return &vllm.AbortResponse{}, nil
}

func (s *vllmServer) GetModelInfo(context.Context, *vllm.GetModelInfoRequest) (*vllm.GetModelInfoResponse, error) {
	c := s.e.cfg
	info := &vllm.GetModelInfoResponse{
		ModelPath:        c.Model,
		IsGeneration:     true,
		MaxContextLength: uint32(c.MaxContextLength),
		VocabSize:        uint32(c.VocabSize),
		ServedModelName:  c.Model,
		TokenizerPath:    c.Model,
		ModelType:        "llama",
		Architectures:    []string{"LlamaForCausalLM"},
		EosTokenIds:      []int32{int32(c.EOSTokenID)},
		PadTokenId:       int32(c.EOSTokenID),
		BosTokenId:       s.e.bosTokenID(),
		MaxReqInputLen:   int32(c.MaxContextLength - 1),
	}
	if s.e.Faults().ModelInfoMinimal {
		info.VocabSize, info.MaxContextLength, info.EosTokenIds, info.MaxReqInputLen = 0, 0, nil, 0
	}
	return info, nil
}

func (s *vllmServer) GetServerInfo(context.Context, *vllm.GetServerInfoRequest) (*vllm.GetServerInfoResponse, error) {
	var connector, role, engineID string
	switch s.e.role() {
	case RolePrefill:
		connector, role = vllmKVConnector, "kv_producer"
		engineID = fmt.Sprintf("%s-%d", s.e.cfg.Model, s.e.BootstrapPort())
	case RoleDecode:
		connector, role = vllmKVConnector, "kv_consumer"
	}
	return &vllm.GetServerInfoResponse{
		KvConnector:          connector,
		KvRole:               role,
		KvEngineId:           engineID,
		ActiveRequests:       uint32(s.e.activeRequests()),
		LastReceiveTimestamp: float64(time.Now().UnixNano()) / 1e9,
		UptimeSeconds:        time.Since(s.e.start).Seconds(),
		ServerType:           "vllm-grpc",
		DataParallelSize:     int32(s.e.DPSize()),
		BlockSize:            int32(s.e.cfg.PageSize),
	}, nil
}

func (s *vllmServer) GetLoads(_ context.Context, req *vllm.GetLoadsRequest) (*vllm.GetLoadsResponse, error) {
	loads := s.e.rankLoads()
	resp := &vllm.GetLoadsResponse{
		Timestamp:   time.Now().UTC().Format(time.RFC3339Nano),
		Version:     "kvgate-sim",
		DpRankCount: int32(len(loads)),
	}
	for rank, l := range loads {
		if req.DpRank != nil && req.GetDpRank() != int32(rank) {
			continue // the request asks for another rank
		}
		resp.Loads = append(resp.Loads, &vllm.SchedulerLoad{
			DpRank:             int32(rank),
			NumRunningReqs:     int32(l.running),
			NumWaitingReqs:     int32(l.waiting),
			NumTotalReqs:       int32(l.total),
			NumUsedTokens:      int32(l.usedTokens),
			MaxTotalNumTokens:  int32(l.maxTokens),
			TokenUsage:         l.tokenUsage,
			GenThroughput:      l.genTput,
			CacheHitRate:       l.cacheHitRate,
			Utilization:        l.utilization,
			MaxRunningRequests: int32(l.maxRunning),
		})
	}
	return resp, nil
}

func (s *vllmServer) SubscribeKvEvents(req *smgcommon.SubscribeKvEventsRequest, stream vllm.VllmEngine_SubscribeKvEventsServer) error {
	if err := s.e.openKvEvents(stream); err != nil {
		return err
	}
	return s.e.subscribeKvEvents(stream.Context(), req.GetStartSequenceNumber(), s.e.streamSend(stream.Send))
}

func (s *vllmServer) GetTokenizer(_ *smgcommon.GetTokenizerRequest, stream grpc.ServerStreamingServer[smgcommon.GetTokenizerChunk]) error {
	return s.e.getTokenizer(stream)
}

// FlushCache drops the prefix cache if no request is waiting or running.
func (s *vllmServer) FlushCache(context.Context, *smgcommon.FlushCacheRequest) (*smgcommon.FlushCacheResponse, error) {
	if err := s.e.flushCache(); err != nil {
		return &smgcommon.FlushCacheResponse{Success: false, Message: err.Error()}, nil
	}
	return &smgcommon.FlushCacheResponse{Success: true, Message: "cache flushed"}, nil
}

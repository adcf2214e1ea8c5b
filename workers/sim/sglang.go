package sim

import (
	"context"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/smgcommon"
)

// sglangDefaultMaxNewTokens is SGLang's max_new_tokens when a request leaves
// it unset.
const sglangDefaultMaxNewTokens = 128

// sglangServer translates SGLang's SglangScheduler service to the engine.
// Embed is in embed.go; profiling and LoRA stay UNIMPLEMENTED.
type sglangServer struct {
	sglang.UnimplementedSglangSchedulerServer
	e *Engine
}

func (s *sglangServer) Generate(req *sglang.GenerateRequest, stream sglang.SglangScheduler_GenerateServer) error {
	r, err := s.request(req)
	if err != nil {
		return err
	}
	rank, err := s.e.forRank(req.GetDataParallelRank(), req.DataParallelRank != nil)
	if err != nil {
		return err
	}
	return rank.generate(stream.Context(), r, func(o output) error {
		resp := &sglang.GenerateResponse{RequestId: r.id}
		if o.final == nil {
			resp.Response = &sglang.GenerateResponse_Chunk{Chunk: &sglang.GenerateStreamChunk{
				TokenIds: o.tokens, PromptTokens: o.promptTokens, CompletionTokens: o.completionTokens, CachedTokens: o.cachedToks,
				OutputLogprobs: sglangOutputLogprobs(o.logprobs), InputLogprobs: sglangInputLogprobs(o.promptLogprobs),
			}}
		} else {
			c := &sglang.GenerateComplete{
				OutputIds: o.final.outputIDs, FinishReason: o.final.finishReason,
				PromptTokens: o.promptTokens, CompletionTokens: o.completionTokens, CachedTokens: o.cachedToks,
				OutputLogprobs: sglangOutputLogprobs(o.logprobs), InputLogprobs: sglangInputLogprobs(o.promptLogprobs),
			}
			c.SpecAcceptedTokens, c.SpecDraftTokens = s.e.speculative(o.completionTokens)
			if o.final.matched != nil {
				c.MatchedStop = &sglang.GenerateComplete_MatchedTokenId{MatchedTokenId: *o.final.matched}
			}
			resp.Response = &sglang.GenerateResponse_Complete{Complete: c}
		}
		return stream.Send(resp)
	})
}

// request validates req as SGLang would and builds the engine's request.
// The sampling seed comes from custom_params["sampling_seed"], where kvgate's
// SGLang adapter puts it; temperature 0 means greedy (seed ignored).
func (s *sglangServer) request(req *sglang.GenerateRequest) (*request, error) {
	e := s.e
	sp := req.GetSamplingParams()
	if sp == nil {
		sp = &sglang.SamplingParams{Temperature: 1}
	}
	if sp.GetN() > 1 {
		return nil, e.invalid("n = %d: the simulator generates one sequence per request", sp.GetN())
	}
	if len(req.GetInputEmbeds()) > 0 || req.GetMmInputs() != nil {
		return nil, e.invalid("only token-id input is supported")
	}
	maxNew := sglangDefaultMaxNewTokens
	if sp.MaxNewTokens != nil {
		maxNew = int(sp.GetMaxNewTokens())
	}
	prompt := req.GetTokenized().GetInputIds()
	if e.cfg.AutoTruncate {
		prompt, maxNew = s.truncate(prompt, maxNew)
	}
	if err := e.checkPrompt(prompt, maxNew); err != nil {
		return nil, err
	}
	dp := req.GetDisaggregatedParams()
	leg, err := e.sglangLeg(dp != nil, dp.GetBootstrapHost(), dp.GetBootstrapPort(), dp.GetBootstrapRoom())
	if err != nil {
		return nil, err
	}
	var seed uint64
	if v, ok := sp.GetCustomParams().GetFields()["sampling_seed"]; ok {
		n, isNum := v.GetKind().(*structpb.Value_NumberValue)
		if !isNum || n.NumberValue != math.Trunc(n.NumberValue) {
			return nil, e.invalid("custom_params.sampling_seed must be an integer")
		}
		seed = uint64(int64(n.NumberValue))
	}
	lp, err := s.logprobs(req, len(prompt))
	if err != nil {
		return nil, err
	}
	sample := e.newSampler(prompt, seed, sp.GetTemperature() == 0, int(sp.GetMinNewTokens()), sp.GetIgnoreEos(), sp.GetStopTokenIds())
	if c, ok := sp.GetConstraint().(*sglang.SamplingParams_JsonSchema); ok {
		if sample.script, err = e.schemaAnswer(c.JsonSchema); err != nil {
			return nil, err
		}
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

// logprobs reads what req asks for: with return_logprob, every output
// token's, and the prompt's from logprob_start_len on when it is not
// negative (SGLang's -1: output only); top_logprobs_num alternatives for
// each.
func (s *sglangServer) logprobs(req *sglang.GenerateRequest, promptLen int) (logprobSpec, error) {
	if !req.GetReturnLogprob() {
		return logprobSpec{}, nil
	}
	k := int(req.GetTopLogprobsNum())
	if err := s.e.checkTopK("top_logprobs_num", k); err != nil {
		return logprobSpec{}, err
	}
	start := int(req.GetLogprobStartLen())
	if start >= promptLen {
		return logprobSpec{}, s.e.invalid("logprob_start_len (%d) is not below the number of input tokens (%d)", start, promptLen)
	}
	return logprobSpec{output: true, outputTopK: k, prompt: start >= 0, promptStart: max(start, 0), promptTopK: k}, nil
}

// sglangOutputLogprobs is lps in SGLang's parallel arrays; nil for none.
func sglangOutputLogprobs(lps []tokenLogprob) *sglang.OutputLogProbs {
	if len(lps) == 0 {
		return nil
	}
	return &sglang.OutputLogProbs{TokenLogprobs: lpValues(lps), TokenIds: lpIDs(lps), TopLogprobs: lpTops(lps, sglangTop)}
}

// sglangInputLogprobs is lps as SGLang's prompt log-probabilities; nil for
// none.
func sglangInputLogprobs(lps []tokenLogprob) *sglang.InputLogProbs {
	if len(lps) == 0 {
		return nil
	}
	return &sglang.InputLogProbs{TokenIds: lpIDs(lps), TopLogprobs: lpTops(lps, sglangTop),
		TokenLogprobs: lpWrapped(lps, func(v *float32) *sglang.InputTokenLogProb { return &sglang.InputTokenLogProb{Value: v} })}
}

func sglangTop(values []float32, ids []uint32) *sglang.TopLogProbs {
	return &sglang.TopLogProbs{Values: values, TokenIds: ids}
}

func (s *sglangServer) HealthCheck(context.Context, *sglang.HealthCheckRequest) (*sglang.HealthCheckResponse, error) {
	if s.e.Faults().Unhealthy {
		return &sglang.HealthCheckResponse{Healthy: false, Message: "sim: injected fault: unhealthy"}, nil
	}
	return &sglang.HealthCheckResponse{Healthy: true, Message: "ok"}, nil
}

func (s *sglangServer) Abort(_ context.Context, req *sglang.AbortRequest) (*sglang.AbortResponse, error) {
	if s.e.abort(req.GetRequestId()) > 0 {
		return &sglang.AbortResponse{Success: true, Message: "aborted"}, nil
	}
	// Like SGLang, aborting a request that already finished is not an error.
	return &sglang.AbortResponse{Success: true, Message: "no such request waiting or running"}, nil
}

func (s *sglangServer) GetModelInfo(context.Context, *sglang.GetModelInfoRequest) (*sglang.GetModelInfoResponse, error) {
	c := s.e.cfg
	info := &sglang.GetModelInfoResponse{
		ModelPath:        c.Model,
		TokenizerPath:    c.Model,
		IsGeneration:     true,
		ServedModelName:  c.Model,
		MaxContextLength: int32(c.MaxContextLength),
		VocabSize:        int32(c.VocabSize),
		ModelType:        "llama",
		EosTokenIds:      []int32{int32(c.EOSTokenID)},
		PadTokenId:       int32(c.EOSTokenID),
		BosTokenId:       s.e.bosTokenID(),
		MaxReqInputLen:   int32(s.maxReqInputLen()),
		Architectures:    []string{"LlamaForCausalLM"},
	}
	if s.e.Faults().ModelInfoMinimal {
		info.VocabSize, info.MaxContextLength, info.EosTokenIds, info.MaxReqInputLen = 0, 0, nil, 0
	}
	if s.e.Faults().ReportsNonsense {
		info.VocabSize, info.MaxContextLength = -1, -7
	}
	return info, nil
}

// maxReqInputLen is the longest prompt the engine accepts, as SGLang's
// scheduler computes it: the prompt must fit the context and the KV cache,
// with one token to spare.
func (s *sglangServer) maxReqInputLen() int {
	return min(s.e.cfg.MaxContextLength, s.e.capacityTokens()) - 1
}

// truncate cuts prompt and maxNew as SGLang started with
// --allow-auto-truncate does: the prompt's head up to max_req_input_len,
// and max new tokens to what the context leaves after it.
func (s *sglangServer) truncate(prompt []uint32, maxNew int) ([]uint32, int) {
	if n := s.maxReqInputLen(); len(prompt) > n && n > 0 {
		prompt = prompt[:n]
	}
	return prompt, max(0, min(maxNew, s.e.cfg.MaxContextLength-len(prompt)))
}

func (s *sglangServer) GetServerInfo(context.Context, *sglang.GetServerInfoRequest) (*sglang.GetServerInfoResponse, error) {
	c := s.e.cfg
	mode := "null"
	if r := s.e.role(); r != RoleRegular {
		mode = r
	}
	fields := map[string]any{
		"model_path":           c.Model,
		"served_model_name":    c.Model,
		"tokenizer_path":       c.Model,
		"page_size":            c.PageSize,
		"max_running_requests": c.MaxRunning,
		"max_total_tokens":     s.e.capacityTokens(),
		"context_length":       c.MaxContextLength,
		"tp_size":              1,
		"dp_size":              s.e.DPSize(),
		"disaggregation_mode":  mode,
		"random_seed":          c.Seed,
		"allow_auto_truncate":  c.AutoTruncate,
	}
	if s.e.boot != nil && !s.e.Faults().UnreportedBootstrapPort {
		fields["disaggregation_bootstrap_port"] = s.e.BootstrapPort()
	}
	total := int32(s.e.capacityTokens())
	if s.e.Faults().ReportsNonsense {
		fields["page_size"], fields["max_running_requests"], total = 1e300, 1e300, -1
	}
	args, err := structpb.NewStruct(fields)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "sim: server_args: %v", err)
	}
	return &sglang.GetServerInfoResponse{
		ServerArgs:           args,
		ActiveRequests:       int32(s.e.activeRequests()),
		LastReceiveTimestamp: float64(time.Now().UnixNano()) / 1e9,
		UptimeSeconds:        time.Since(s.e.start).Seconds(),
		SglangVersion:        "kvgate-sim",
		ServerType:           "grpc",
		StartTime:            timestamppb.New(s.e.start),
		MaxTotalNumTokens:    total,
	}, nil
}

func (s *sglangServer) GetLoads(_ context.Context, req *sglang.GetLoadsRequest) (*sglang.GetLoadsResponse, error) {
	loads := s.e.rankLoads()
	resp := &sglang.GetLoadsResponse{
		Timestamp:   time.Now().UTC().Format(time.RFC3339Nano),
		Version:     "kvgate-sim",
		DpRankCount: int32(len(loads)),
		Aggregate:   sglangAggregate(loads),
	}
	for rank, l := range loads {
		if req.DpRank != nil && req.GetDpRank() != int32(rank) {
			continue // the request asks for another rank
		}
		resp.Loads = append(resp.Loads, s.rankLoad(int32(rank), l, req.GetInclude()))
	}
	return resp, nil
}

// rankLoad is one rank's SchedulerLoad with the sections include asks for.
func (s *sglangServer) rankLoad(rank int32, l load, include []string) *sglang.SchedulerLoad {
	sl := &sglang.SchedulerLoad{
		DpRank:                   rank,
		NumRunningReqs:           int32(l.running),
		NumWaitingReqs:           int32(l.waiting),
		NumTotalReqs:             int32(l.total),
		NumUsedTokens:            int32(l.usedTokens),
		MaxTotalNumTokens:        int32(l.maxTokens),
		TokenUsage:               l.tokenUsage,
		GenThroughput:            l.genTput,
		CacheHitRate:             l.cacheHitRate,
		Utilization:              l.utilization,
		MaxRunningRequests:       int32(l.maxRunning),
		NumWaitingUncachedTokens: int32(l.waitingUncachedTokens),
	}
	if s.e.Faults().ReportsNonsense {
		sl.NumRunningReqs, sl.NumWaitingReqs, sl.MaxTotalNumTokens, sl.MaxRunningRequests = -50, -3, -1, -2
		sl.TokenUsage, sl.CacheHitRate = math.NaN(), 7
	}
	if r := s.e.role(); r != RoleRegular {
		sl.Disaggregation = &sglang.DisaggregationMetrics{Mode: r, DecodeTransferQueueReqs: int32(l.transferring)}
		if r == RoleDecode {
			sl.Disaggregation.KvTransferSpeedGbS = s.e.cfg.KVTransferGBps
		}
	}
	for _, inc := range include {
		switch inc {
		case "memory", "all":
			sl.Memory = &sglang.MemoryMetrics{WeightGb: 16, KvCacheGb: float64(l.maxTokens) * 131072 / 1e9, TokenCapacity: int32(l.maxTokens)}
		}
		switch inc {
		case "queues", "all":
			sl.Queues = &sglang.QueueMetrics{Waiting: int32(l.waiting)}
		}
	}
	return sl
}

// FlushCache drops the prefix cache if no request is waiting or running.
func (s *sglangServer) FlushCache(context.Context, *smgcommon.FlushCacheRequest) (*smgcommon.FlushCacheResponse, error) {
	if err := s.e.flushCache(); err != nil {
		return &smgcommon.FlushCacheResponse{Success: false, Message: err.Error()}, nil
	}
	return &smgcommon.FlushCacheResponse{Success: true, Message: "cache flushed"}, nil
}

func (s *sglangServer) SubscribeKvEvents(req *smgcommon.SubscribeKvEventsRequest, stream sglang.SglangScheduler_SubscribeKvEventsServer) error {
	if err := s.e.openKvEvents(stream); err != nil {
		return err
	}
	return s.e.subscribeKvEvents(stream.Context(), req.GetStartSequenceNumber(), s.e.streamSend(stream.Send))
}

func (s *sglangServer) GetTokenizer(_ *smgcommon.GetTokenizerRequest, stream grpc.ServerStreamingServer[smgcommon.GetTokenizerChunk]) error {
	return s.e.getTokenizer(stream)
}

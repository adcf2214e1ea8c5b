package server

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/tokenize/cache"
	"github.com/kvgate/kvgate/workers"
)

// Metrics are the router's Prometheus series (prefix kvgate_). They live in a
// registry of their own rather than the process-global one, so several routers
// can run in one process (tests, the embedded default) without clashing.
type Metrics struct {
	Registry *prometheus.Registry

	kv *workers.KVEventCounters
	// SMG's documented metrics under their names (smg_ → kvgate_), beside
	// kvgate's own, so that their PromQL and alerts work unchanged.
	cacheHits, cacheMisses prometheus.Counter
	branches               *prometheus.CounterVec
	policyLatency          *prometheus.HistogramVec
	// Tokens of completed requests by worker, as the engines reported
	// them: cached / prompt is an engine's real prefix-cache hit ratio.
	promptTokens, completionTokens, cachedTokens *prometheus.CounterVec
	// specDraft and specAccepted are the engines' speculative decoding
	// counts (GenerateComplete spec_draft_tokens, spec_accepted_tokens).
	specDraft, specAccepted *prometheus.CounterVec
	// Input tokens of completed Embed batches, apart from the prompt
	// tokens so that cached / prompt stays the engines' hit ratio (they
	// report no cached tokens for embeddings).
	embedTokens   *prometheus.CounterVec
	itl           prometheus.Histogram
	modelRequests *prometheus.CounterVec
	toolCalls     *prometheus.CounterVec

	requests   *prometheus.CounterVec
	errors     *prometheus.CounterVec
	ttft       prometheus.Histogram
	latency    *prometheus.HistogramVec
	selections *prometheus.CounterVec
	aborts     *prometheus.CounterVec
	decisions  *prometheus.CounterVec

	pdTTFT     prometheus.Histogram
	pdPrefill  prometheus.Histogram
	pdHandoff  prometheus.Histogram
	pdFailures *prometheus.CounterVec

	retries              *prometheus.CounterVec
	retryBudgetExhausted prometheus.Counter
	admissionRejected    *prometheus.CounterVec
	breakerTransitions   *workers.BreakerTransitions
	rpcLacking           *prometheus.CounterVec

	predictions      prometheus.Counter
	predictionsExact prometheus.Counter
	predictionOver   prometheus.Counter
	predictionUnder  prometheus.Counter
	predictionError  prometheus.Counter
}

// latencyBuckets span 1 ms to about 2 minutes: LLM requests range from a
// cached one-token reply to a long generation.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 18)

// NewMetrics creates the router's metrics. Per-worker gauges (active requests,
// health, engine load) are read from reg at scrape time, so they can never
// drift from the registry's own counters.
func NewMetrics(reg *workers.Registry) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_requests_total",
			Help: "RPCs handled, by full method and gRPC status code.",
		}, []string{"method", "code"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_request_errors_total",
			Help: "RPCs that ended with a status other than OK, by full method and gRPC status code.",
		}, []string{"method", "code"}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvgate_time_to_first_token_seconds",
			Help:    "Time from receiving a Generate request to receiving its first token from the worker.",
			Buckets: latencyBuckets,
		}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvgate_request_duration_seconds",
			Help:    "End-to-end RPC latency, by full method.",
			Buckets: latencyBuckets,
		}, []string{"method"}),
		selections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_worker_selections_total",
			Help: "Requests a policy sent to each worker.",
		}, []string{"worker", "policy"}),
		aborts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_worker_aborts_total",
			Help: "Abort calls sent to workers because the client went away or its deadline passed.",
		}, []string{"worker"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_policy_decisions_total",
			Help: "Routing decisions by policy and the rule that decided (cache_hit, cache_miss, imbalance, ring, sticky, ...).",
		}, []string{"policy", "branch"}),
		pdTTFT: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvgate_pd_time_to_first_token_seconds",
			Help:    "With prefill/decode disaggregation: from receiving the request to the decode leg's first token.",
			Buckets: latencyBuckets,
		}),
		pdPrefill: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvgate_pd_prefill_duration_seconds",
			Help:    "Duration of successful prefill legs.",
			Buckets: latencyBuckets,
		}),
		pdHandoff: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvgate_pd_kv_transfer_seconds",
			Help:    "From the prefill leg's end to the decode leg's first token: the KV transfer plus the first decode step.",
			Buckets: latencyBuckets,
		}),
		pdFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_pd_failures_total",
			Help: "Disaggregated requests that failed, by the leg that failed (prefill or decode).",
		}, []string{"leg"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_retries_total",
			Help: "Requests retried on another worker after a failure before the first token, by the worker that failed.",
		}, []string{"worker"}),
		retryBudgetExhausted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvgate_retry_budget_exhausted_total",
			Help: "Retries refused by the retry budget: retries in flight had reached what the workers able to serve take (each its share of the requests in flight, at least --retry-budget-per-worker), or --retry-budget-percent of the requests in flight when that is more.",
		}),
		admissionRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_admission_rejected_total",
			Help: "Requests refused with RESOURCE_EXHAUSTED by admission control, by reason (queue_full, queue_timeout, rate_limit, logprob_bytes).",
		}, []string{"reason"}),
		breakerTransitions: workers.NewBreakerTransitions(),
		rpcLacking: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_worker_rpc_unimplemented_total",
			Help: "Times a worker showed it lacks an optional engine RPC (UNIMPLEMENTED, or an unusable Embed answer) and was left out of that RPC's placements for 5 minutes, by worker and rpc; never counted against its circuit breaker.",
		}, []string{"worker", "rpc"}),
		predictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvgate_cache_prediction_observations_total",
			Help: "Completed requests whose predicted cached tokens were compared with the engine's report.",
		}),
		predictionsExact: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvgate_cache_prediction_exact_total",
			Help: "Predictions equal to the engine's reported cached tokens (divide by observations for the exact-match ratio).",
		}),
		predictionOver: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvgate_cache_prediction_overpredicted_total",
			Help: "Predictions above what the engine reported: the engine had evicted (the tree is trimmed).",
		}),
		predictionUnder: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvgate_cache_prediction_underpredicted_total",
			Help: "Predictions below what the engine reported.",
		}),
		predictionError: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvgate_cache_prediction_error_tokens_total",
			Help: "Sum of |predicted - reported| cached tokens (divide by observations for the mean token error).",
		}),
	}
	m.Registry.MustRegister(m.requests, m.errors, m.ttft, m.latency, m.selections, m.aborts, m.decisions,
		m.pdTTFT, m.pdPrefill, m.pdHandoff, m.pdFailures, m.retries, m.retryBudgetExhausted, m.admissionRejected, m.breakerTransitions, m.rpcLacking,
		m.predictions, m.predictionsExact, m.predictionOver, m.predictionUnder, m.predictionError,
		workers.NewCollector(reg),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.kv = workers.NewKVEventCounters()
	m.Registry.MustRegister(m.kv)
	m.cacheHits = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvgate_router_cache_hits_total",
		Help: "Decisions of a cache-aware policy that sent the request where its prefix is cached (branch cache_hit; SMG's smg_router_cache_hits_total)."})
	m.cacheMisses = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvgate_router_cache_misses_total",
		Help: "Decisions of a cache-aware policy taken on any other rule (cache_miss, imbalance, overloaded; SMG's smg_router_cache_misses_total)."})
	m.branches = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_worker_selection_policy_branch_total",
		Help: "Routing decisions by policy and the rule that decided (SMG's smg_worker_selection_policy_branch_total; the same as kvgate_policy_decisions_total)."},
		[]string{"policy", "branch"})
	m.policyLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvgate_request_latency_seconds",
		Help: "Generation requests' end-to-end latency by the policy that placed them (SMG's smg_request_latency_seconds).", Buckets: latencyBuckets},
		[]string{"policy"})
	m.promptTokens = workerCounter("kvgate_worker_prompt_tokens_total", "Prompt tokens of completed requests, by the worker that served them.")
	m.completionTokens = workerCounter("kvgate_worker_completion_tokens_total", "Generated tokens of completed requests, by worker.")
	m.specDraft = workerCounter("kvgate_worker_spec_draft_tokens_total",
		"Draft tokens the worker's speculative decoding proposed for completed requests, as the engine reports them.")
	m.specAccepted = workerCounter("kvgate_worker_spec_accepted_tokens_total",
		"Draft tokens the worker's model accepted for completed requests, as the engine reports them; accepted / draft is the acceptance rate.")
	m.cachedTokens = workerCounter("kvgate_worker_cached_tokens_total",
		"Prompt tokens the worker's engine reported cached (not recomputed); divided by the prompt tokens, its real prefix-cache hit ratio.")
	m.embedTokens = workerCounter("kvgate_worker_embed_tokens_total",
		"Input tokens of completed Embed requests, by the worker that embedded them (not in kvgate_worker_prompt_tokens_total).")
	m.itl = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvgate_inter_token_latency_seconds",
		Help:    "Time between consecutive output tokens reaching the router (a chunk of several tokens shares its gap among them).",
		Buckets: []float64{.001, .0025, .005, .0075, .01, .015, .02, .03, .05, .075, .1, .25, .5, 1}})
	m.modelRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_model_requests_total",
		Help: "Requests placed, by the model they ran on (with --enable-igw, the model they named)."}, []string{"model"})
	m.toolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvgate_tool_calls_total",
		Help: "Chat with tools: calls parsed out of answers (result=parsed), and answers holding a call that did not parse, returned as content (result=malformed)."},
		[]string{"model", "result"})
	m.Registry.MustRegister(m.specDraft, m.specAccepted)
	m.Registry.MustRegister(m.cacheHits, m.cacheMisses, m.branches, m.policyLatency, m.promptTokens, m.completionTokens, m.cachedTokens,
		m.embedTokens, m.itl, m.modelRequests, m.toolCalls)
	return m
}

// registerAdmissionGauges exports the admission queue's depth and the requests in
// the pipeline, read at scrape time.
func (m *Metrics) registerAdmissionGauges(waiting func() int, active *atomic.Int64) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kvgate_admission_queue_depth",
			Help: "Requests waiting in the router, for a place under --max-concurrent-requests or an engine with room (all models).",
		}, func() float64 { return float64(waiting()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kvgate_requests_in_flight",
			Help: "Router requests between placement and their end: generations until their last chunk, Embed batches until their answer.",
		}, func() float64 { return float64(active.Load()) }),
	)
}

// BreakerChanged counts a circuit breaker's change of state; the router
// calls it from every worker's breaker.
func (m *Metrics) BreakerChanged(to workers.BreakerState) { m.breakerTransitions.Changed(to) }

func (m *Metrics) observe(method string, err error, elapsed time.Duration) {
	code := status.Code(err).String()
	m.requests.WithLabelValues(method, code).Inc()
	if err != nil {
		m.errors.WithLabelValues(method, code).Inc()
	}
	m.latency.WithLabelValues(method).Observe(elapsed.Seconds())
}

// monitored reports whether method is one of kvgate's own services; health and
// reflection calls would only add noise to request metrics.
func monitored(method string) bool { return strings.HasPrefix(method, "/kvgate.") }

// UnaryInterceptor counts unary RPCs and their latency.
func (m *Metrics) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	if monitored(info.FullMethod) {
		m.observe(info.FullMethod, err, time.Since(start))
	}
	return resp, err
}

// StreamInterceptor counts streaming RPCs and their latency.
func (m *Metrics) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	err := handler(srv, ss)
	if monitored(info.FullMethod) {
		m.observe(info.FullMethod, err, time.Since(start))
	}
	return err
}

// tokenizerStats are the tokenizer caches' counters, one per model with a
// tokenizer, for the cache package's collector.
func (s *Server) tokenizerStats() []cache.Stats {
	var out []cache.Stats
	for _, r := range s.models.All() {
		if r.Text != nil {
			out = append(out, r.Text.CacheStats())
		}
	}
	return out
}

// servedPolicies are the models' main policies, named as the metrics name
// models, for the policy package's collector.
func (s *Server) servedPolicies() []policy.Served {
	var out []policy.Served
	for _, r := range s.models.All() {
		model := r.Name
		if model == "" {
			model = s.servedModel()
		}
		out = append(out, policy.Served{Model: model, Policy: r.Main()})
	}
	return out
}

func (m *Metrics) observePrediction(predicted, reported int) {
	m.predictions.Inc()
	switch {
	case predicted == reported:
		m.predictionsExact.Inc()
	case predicted > reported:
		m.predictionOver.Inc()
		m.predictionError.Add(float64(predicted - reported))
	default:
		m.predictionUnder.Inc()
		m.predictionError.Add(float64(reported - predicted))
	}
}

// decided counts one routing decision of policy, and for cache-aware
// policies (those that predict a match) a cache hit or miss.
func (m *Metrics) decided(policy string, d policy.Decision) {
	m.decisions.WithLabelValues(policy, d.Branch).Inc()
	m.branches.WithLabelValues(policy, d.Branch).Inc()
	if d.Matched == nil {
		return
	}
	if d.Branch == "cache_hit" {
		m.cacheHits.Inc()
	} else {
		m.cacheMisses.Inc()
	}
}

// countTokens adds a completed request's usage to its worker's counters.
func (m *Metrics) countTokens(worker string, u *kvgatev1.Usage) {
	m.promptTokens.WithLabelValues(worker).Add(float64(u.GetPromptTokens()))
	m.completionTokens.WithLabelValues(worker).Add(float64(u.GetCompletionTokens()))
	m.cachedTokens.WithLabelValues(worker).Add(float64(u.GetCachedTokens()))
	m.specDraft.WithLabelValues(worker).Add(float64(u.GetSpecDraftTokens()))
	m.specAccepted.WithLabelValues(worker).Add(float64(u.GetSpecAcceptedTokens()))
}

// workerCounter is a counter with one series per worker.
func workerCounter(name, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"worker"})
}

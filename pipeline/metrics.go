package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/policy"
)

// Metrics are the series the pipeline records: placements and decisions,
// tokens and latencies of the answers it relays, retries, aborts and the
// accuracy of cache predictions. It is a prometheus.Collector: the router
// registers it beside its own series, so several routers can run in one
// process without clashing.
type Metrics struct {
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
	// queueWait and queueWaiting are late binding's: how long requests
	// waited in the router and why, and how many wait now per model.
	queueWait    *prometheus.HistogramVec
	queueWaiting *prometheus.GaugeVec

	ttft       prometheus.Histogram
	selections *prometheus.CounterVec
	aborts     *prometheus.CounterVec
	decisions  *prometheus.CounterVec

	retries              *prometheus.CounterVec
	retryBudgetExhausted prometheus.Counter
	rpcLacking           *prometheus.CounterVec

	predictions      prometheus.Counter
	predictionsExact prometheus.Counter
	predictionOver   prometheus.Counter
	predictionUnder  prometheus.Counter
	predictionError  prometheus.Counter

	// all are the collectors above, for Describe and Collect.
	all []prometheus.Collector
}

// latencyBuckets span 1 ms to about 2 minutes: LLM requests range from a
// cached one-token reply to a long generation.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 18)

// NewMetrics creates the pipeline's series, registered nowhere until a
// registry takes the Metrics as a collector.
func NewMetrics() *Metrics {
	m := &Metrics{
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvgate_time_to_first_token_seconds",
			Help:    "Time from receiving a Generate request to receiving its first token from the worker.",
			Buckets: latencyBuckets,
		}),
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
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_retries_total",
			Help: "Requests retried on another worker after a failure before the first token, by the worker that failed.",
		}, []string{"worker"}),
		retryBudgetExhausted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvgate_retry_budget_exhausted_total",
			Help: "Retries refused by the retry budget: retries in flight had reached what the workers able to serve take (each its share of the requests in flight, at least --retry-budget-per-worker), or --retry-budget-percent of the requests in flight when that is more.",
		}),
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
	m.queueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kvgate_queue_wait_seconds",
		Help:    "Time requests waited in the router before being bound to an engine, by model and reason (engines_full: every candidate engine was at its running-request limit; router_limit: --max-concurrent-requests; passed_over: an engine had room, which matching gave to a request behind it that holds more of its prompt there).",
		Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"model", "reason"})
	m.queueWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kvgate_queue_waiting_requests",
		Help: "Requests waiting in the router for an engine with room or a place under --max-concurrent-requests, by model.",
	}, []string{"model"})
	m.all = []prometheus.Collector{m.queueWait, m.queueWaiting, m.ttft, m.selections, m.aborts, m.decisions,
		m.retries, m.retryBudgetExhausted, m.rpcLacking,
		m.predictions, m.predictionsExact, m.predictionOver, m.predictionUnder, m.predictionError,
		m.specDraft, m.specAccepted,
		m.cacheHits, m.cacheMisses, m.branches, m.policyLatency, m.promptTokens, m.completionTokens, m.cachedTokens,
		m.embedTokens, m.itl, m.modelRequests, m.toolCalls}
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all {
		c.Collect(ch)
	}
}

// observePrediction compares a placement's predicted cached tokens with
// what the engine reported.
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

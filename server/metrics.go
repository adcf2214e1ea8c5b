package server

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/pd/pdplan"
	"github.com/kvgate/kvgate/pipeline"
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
	// pipe are the request pipeline's series, which it records; pd the
	// disaggregated placements' (pdplan).
	pipe *pipeline.Metrics
	pd   *pdplan.Metrics

	requests           *prometheus.CounterVec
	errors             *prometheus.CounterVec
	latency            *prometheus.HistogramVec
	admissionRejected  *prometheus.CounterVec
	clientTimeouts     *prometheus.CounterVec
	breakerTransitions *workers.BreakerTransitions
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
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvgate_request_duration_seconds",
			Help:    "End-to-end RPC latency, by full method.",
			Buckets: latencyBuckets,
		}, []string{"method"}),
		admissionRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_admission_rejected_total",
			Help: "Requests refused with RESOURCE_EXHAUSTED by admission control, by reason (queue_full, queue_timeout, rate_limit, logprob_bytes).",
		}, []string{"reason"}),
		clientTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_client_timeouts_total",
			Help: "Generate and Chat calls ended with DEADLINE_EXCEEDED by a bound on their client, by bound: request_read (the request did not arrive within --request-read-timeout), stream_send (a message of the answer was not taken within --stream-send-timeout).",
		}, []string{"bound"}),
		breakerTransitions: workers.NewBreakerTransitions(),
		pipe:               pipeline.NewMetrics(),
		pd:                 pdplan.NewMetrics(),
	}
	m.Registry.MustRegister(m.requests, m.errors, m.latency, m.admissionRejected, m.clientTimeouts, m.breakerTransitions, m.pipe, m.pd,
		workers.NewCollector(reg),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.kv = workers.NewKVEventCounters()
	m.Registry.MustRegister(m.kv)
	return m
}

// registerAdmissionGauges exports the admission queue's depth and the requests in
// the pipeline, read at scrape time.
func (m *Metrics) registerAdmissionGauges(waiting func() int, inFlight func() int64) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kvgate_admission_queue_depth",
			Help: "Requests waiting in the router, for a place under --max-concurrent-requests or an engine with room (all models).",
		}, func() float64 { return float64(waiting()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kvgate_requests_in_flight",
			Help: "Router requests between placement and their end: generations until their last chunk, Embed batches until their answer.",
		}, func() float64 { return float64(inFlight()) }),
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
			model = s.pipe.ServedModel()
		}
		out = append(out, policy.Served{Model: model, Policy: r.Main()})
	}
	return out
}

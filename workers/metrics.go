package workers

import "github.com/prometheus/client_golang/prometheus"

// Collector reports each registered worker's live state at scrape time,
// read from the registry's snapshot, so that no gauge can drift from the
// counters the workers keep themselves.
type Collector struct{ reg *Registry }

// NewCollector returns the per-worker collector over reg.
func NewCollector(reg *Registry) *Collector { return &Collector{reg: reg} }

var (
	descActive = prometheus.NewDesc("kvgate_worker_active_requests",
		"Requests this router has in flight on the worker.", []string{"worker"}, nil)
	// descRequestsActive is descActive under SMG's name
	// (smg_worker_requests_active), so its PromQL works unchanged.
	descRequestsActive = prometheus.NewDesc("kvgate_worker_requests_active",
		"Requests this router has in flight on each worker (SMG's smg_worker_requests_active).", []string{"worker"}, nil)
	descEngineHitRate = prometheus.NewDesc("kvgate_worker_engine_cache_hit_rate",
		"The engine's own prefix-cache hit rate, as it reported it at the last load poll (0 when it reports none).", []string{"worker"}, nil)
	descHealthy = prometheus.NewDesc("kvgate_worker_healthy",
		"1 when the worker passes health checks and may receive requests, else 0.", []string{"worker"}, nil)
	descLoad = prometheus.NewDesc("kvgate_worker_load",
		"The load figure policies compare: requests in flight here plus the engine's other requests.", []string{"worker"}, nil)
	descEngineRunning = prometheus.NewDesc("kvgate_worker_engine_running_requests",
		"Running requests the engine reported at the last load poll.", []string{"worker"}, nil)
	descEngineWaiting = prometheus.NewDesc("kvgate_worker_engine_waiting_requests",
		"Waiting requests the engine reported at the last load poll.", []string{"worker"}, nil)
	descKVUsage = prometheus.NewDesc("kvgate_worker_kv_cache_usage_ratio",
		"Fraction of the engine's KV cache in use at the last load poll.", []string{"worker"}, nil)
	descBreaker = prometheus.NewDesc("kvgate_worker_circuit_breaker_state",
		"The worker's circuit breaker: 0 closed, 1 open (no requests), 2 half-open (probing).", []string{"worker"}, nil)
	descWorkerInfo = prometheus.NewDesc("kvgate_worker_info",
		"Always 1: the worker's model, role and protocol, to join per-worker metrics by worker (e.g. * on(worker) group_left(model)).",
		[]string{"worker", "model", "role", "protocol"}, nil)
	descDraining = prometheus.NewDesc("kvgate_worker_draining",
		"1 while the worker is being removed (Admin.RemoveWorker): it gets no new requests.", []string{"worker"}, nil)

	// The engine's speed as the router learned it from the requests it
	// relayed (learned.go), which the wait mode prices candidates with:
	// exported so that an operator can see why the router takes an engine
	// for slow. Each has no series for a worker until its figure is
	// learned, as 0 would read as an infinitely fast engine.
	descPrefillRate = prometheus.NewDesc("kvgate_worker_prefill_tokens_per_second",
		"The engine's prefill rate learned from this router's requests that found its queue empty (no series until learned).", []string{"worker"}, nil)
	descRequestMean = prometheus.NewDesc("kvgate_worker_request_duration_mean_seconds",
		"Moving mean of how long this router's requests held the worker, from placement to release (no series until one has ended).", []string{"worker"}, nil)
	descRequestCV = prometheus.NewDesc("kvgate_worker_request_duration_cv",
		"Coefficient of variation of those durations: their standard deviation over their mean (no series until one has ended).", []string{"worker"}, nil)
	descStepBase = prometheus.NewDesc("kvgate_worker_decode_step_seconds",
		"The engine's learned decode step with an empty batch: seconds per output token (no series until a request has decoded).", []string{"worker"}, nil)
	descStepPerRequest = prometheus.NewDesc("kvgate_worker_decode_step_per_request_seconds",
		"How much the learned decode step grows for each request in the engine's batch (no series until a request has decoded).", []string{"worker"}, nil)
	descDecodeTokens = prometheus.NewDesc("kvgate_worker_decode_mean_tokens",
		"Moving mean of the tokens this router's requests decoded on the worker after their first (no series until one has decoded).", []string{"worker"}, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descActive, descRequestsActive, descEngineHitRate, descHealthy, descLoad,
		descEngineRunning, descEngineWaiting, descKVUsage, descBreaker, descDraining, descWorkerInfo,
		descPrefillRate, descRequestMean, descRequestCV, descStepBase, descStepPerRequest, descDecodeTokens} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, w := range c.reg.Snapshot() {
		el := w.EngineLoad()
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, w.URL())
		}
		gauge(descActive, float64(w.InFlight()))
		gauge(descRequestsActive, float64(w.InFlight()))
		gauge(descHealthy, oneIf(w.Healthy()))
		gauge(descLoad, float64(w.Load()))
		gauge(descEngineRunning, float64(el.Running))
		gauge(descEngineWaiting, float64(el.Waiting))
		gauge(descKVUsage, el.TokenUsage)
		gauge(descEngineHitRate, el.CacheHitRate)
		gauge(descBreaker, breakerValue(w.Breaker().State()))
		gauge(descDraining, oneIf(w.Draining()))
		ch <- prometheus.MustNewConstMetric(descWorkerInfo, prometheus.GaugeValue, 1, w.URL(), w.Info().Model, w.Role().String(),
			w.Protocol().String())
		// The learned figures are 0 until learned (Step says so with ok):
		// their series are left out until then. The spread is published
		// with the mean, and 0 is a real spread once one request ended.
		if r := w.PrefillTokensPerSec(); r > 0 {
			gauge(descPrefillRate, r)
		}
		if m := w.MeanRequestSeconds(); m > 0 {
			gauge(descRequestMean, m)
			gauge(descRequestCV, w.RequestSecondsCV())
		}
		if m, ok := w.Step(); ok {
			gauge(descStepBase, m.Base)
			gauge(descStepPerRequest, m.PerRequest)
			gauge(descDecodeTokens, m.Tokens)
		}
	}
}

func oneIf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func breakerValue(s BreakerState) float64 {
	switch s {
	case BreakerOpen:
		return 1
	case BreakerHalfOpen:
		return 2
	}
	return 0
}

// BreakerTransitions counts the circuit breakers' changes of state, by the
// state entered; every worker's breaker reports to it (Changed).
type BreakerTransitions struct{ c *prometheus.CounterVec }

// NewBreakerTransitions returns the counter, unregistered.
func NewBreakerTransitions() *BreakerTransitions {
	return &BreakerTransitions{c: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvgate_circuit_breaker_transitions_total",
		Help: "Circuit breaker state changes, by the state entered (open, half_open, closed).",
	}, []string{"state"})}
}

// Changed counts one breaker entering state to.
func (b *BreakerTransitions) Changed(to BreakerState) { b.c.WithLabelValues(to.String()).Inc() }

// Describe implements prometheus.Collector.
func (b *BreakerTransitions) Describe(ch chan<- *prometheus.Desc) { b.c.Describe(ch) }

// Collect implements prometheus.Collector.
func (b *BreakerTransitions) Collect(ch chan<- prometheus.Metric) { b.c.Collect(ch) }

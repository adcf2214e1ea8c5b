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
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descActive, descRequestsActive, descEngineHitRate, descHealthy, descLoad,
		descEngineRunning, descEngineWaiting, descKVUsage, descBreaker, descDraining, descWorkerInfo} {
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

package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/kvgate/kvgate/modeltable"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// KVEventStatuser reports the KV event subscription of a worker, by URL
// (workers.KVSubscriptions does).
type KVEventStatuser interface {
	Status(url string) (workers.KVEventStatus, bool)
}

// kvEventMetrics are the counters the KV event subscriptions feed.
type kvEventMetrics struct {
	applied    *prometheus.CounterVec
	gaps       *prometheus.CounterVec
	resets     *prometheus.CounterVec
	resyncs    *prometheus.CounterVec
	duplicates *prometheus.CounterVec
	failures   *prometheus.CounterVec
	lag        prometheus.Histogram
}

func newKVEventMetrics() kvEventMetrics {
	return kvEventMetrics{
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_kv_events_applied_total",
			Help: "KV cache events applied to the router's view of the engines' caches, by type (stored, removed, cleared).",
		}, []string{"type"}),
		gaps: workerCounter("kvgate_kv_event_gaps_total",
			"Skipped KV event sequence numbers (lost events): the worker's view was cleared and its stream restarted from scratch."),
		resets: workerCounter("kvgate_kv_event_resets_total",
			"KV event sequence numbers that went backwards (the engine restarted): the worker's view was cleared."),
		resyncs: workerCounter("kvgate_kv_event_resyncs_total",
			"KV event streams restarted from scratch because the engine could not replay what was missed (OUT_OF_RANGE, DATA_LOSS)."),
		duplicates: workerCounter("kvgate_kv_event_duplicates_total",
			"KV event batches received twice and skipped."),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_kv_event_subscription_failures_total",
			Help: "KV event subscriptions that failed to open or broke, by worker and gRPC code.",
		}, []string{"worker", "code"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvgate_kv_event_lag_seconds",
			Help:    "Time from an engine's KV event batch (its timestamp) to the router receiving it.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
	}
}

func (k kvEventMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{k.applied, k.gaps, k.resets, k.resyncs, k.duplicates, k.failures, k.lag}
}

// KVEventMetrics returns the hooks a workers.KVSubscriptions feeds.
func (m *Metrics) KVEventMetrics() workers.KVEventMetrics {
	k := m.kv
	return workers.KVEventMetrics{
		Applied: func(_ string, kind workers.KVEventKind, n int) {
			k.applied.WithLabelValues(kind.String()).Add(float64(n))
		},
		Gap:       func(w string) { k.gaps.WithLabelValues(w).Inc() },
		Reset:     func(w string) { k.resets.WithLabelValues(w).Inc() },
		Resync:    func(w string) { k.resyncs.WithLabelValues(w).Inc() },
		Duplicate: func(w string) { k.duplicates.WithLabelValues(w).Inc() },
		Failure:   func(w string, c codes.Code) { k.failures.WithLabelValues(w, c.String()).Inc() },
		Lag:       func(_ string, d time.Duration) { k.lag.Observe(d.Seconds()) },
	}
}

// speculationStatser is implemented by policies whose speculative cache
// entries expire (cache_aware).
type speculationStatser interface{ SpeculativeExpired() uint64 }

// eventStatser is implemented by the policies that mirror the engines'
// caches from their KV events (cache_aware, vllm_cache_aware).
type eventStatser interface{ EventStats() policy.EventStats }

// kvDropReasons are the reasons policy.EventStats.Dropped counts, each
// exported from the start so that a rate over it is defined before a bound
// first bites.
var kvDropReasons = []string{"rank", "detached", "overflow"}

// kvEventCollector reports, at scrape time, each worker's cache mode and
// the speculative entries that expired unconfirmed.
type kvEventCollector struct {
	reg    *workers.Registry
	status KVEventStatuser
	models *modeltable.Table[dispatcher]
}

var (
	descKVEventMode = prometheus.NewDesc("kvgate_worker_kv_events",
		"1 when the router's view of the worker's cache follows its KV events, 0 when it is approximated (no events, or not yet).",
		[]string{"worker"}, nil)
	descSpeculativeExpired = prometheus.NewDesc("kvgate_cache_speculative_expired_total",
		"Routing decisions whose speculative cache entries expired unconfirmed on workers with KV events: the engine did not store what the router expected.",
		nil, nil)
	descKVBlocksDropped = prometheus.NewDesc("kvgate_kv_event_blocks_dropped_total",
		"Blocks of the engines' KV events a bound of the router's cache mirror dropped, by reason: rank (a data-parallel rank the fleet is not configured with), detached (blocks that never attached, past their bound), overflow (a worker's mirror reset past its bound).",
		[]string{"reason"}, nil)
)

func (kvEventCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descKVEventMode
	ch <- descSpeculativeExpired
	ch <- descKVBlocksDropped
}

func (c kvEventCollector) Collect(ch chan<- prometheus.Metric) {
	for _, w := range c.reg.Snapshot() {
		v := 0.0
		if c.status != nil {
			if st, ok := c.status.Status(w.URL()); ok && st.Mode == workers.KVModeEvents {
				v = 1
			}
		}
		ch <- prometheus.MustNewConstMetric(descKVEventMode, prometheus.GaugeValue, v, w.URL())
	}
	expired, any := 0.0, false
	for _, r := range c.models.All() {
		if s, ok := r.Main().(speculationStatser); ok {
			expired, any = expired+float64(s.SpeculativeExpired()), true
		}
	}
	if any {
		ch <- prometheus.MustNewConstMetric(descSpeculativeExpired, prometheus.CounterValue, expired)
	}
	dropped, mirrors := map[string]uint64{}, false
	for _, r := range c.models.All() {
		if s, ok := r.Main().(eventStatser); ok {
			mirrors = true
			for reason, n := range s.EventStats().Dropped {
				dropped[reason] += n
			}
		}
	}
	if mirrors {
		for _, reason := range kvDropReasons {
			ch <- prometheus.MustNewConstMetric(descKVBlocksDropped, prometheus.CounterValue, float64(dropped[reason]), reason)
		}
	}
}

package workers

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// KVEventCounters are the series the KV event subscriptions feed through
// their hooks (Hooks). Register it as one prometheus.Collector.
type KVEventCounters struct {
	applied    *prometheus.CounterVec
	gaps       *prometheus.CounterVec
	resets     *prometheus.CounterVec
	resyncs    *prometheus.CounterVec
	duplicates *prometheus.CounterVec
	failures   *prometheus.CounterVec
	lag        prometheus.Histogram
}

// KVStatuser reports the KV event subscription of a worker, by URL
// (KVSubscriptions does).
type KVStatuser interface {
	Status(url string) (KVEventStatus, bool)
}

// NewKVEventCounters returns the counters, unregistered.
func NewKVEventCounters() *KVEventCounters {
	perWorker := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"worker"})
	}
	return &KVEventCounters{
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_kv_events_applied_total",
			Help: "KV cache events applied to the router's view of the engines' caches, by type (stored, removed, cleared).",
		}, []string{"type"}),
		gaps: perWorker("kvgate_kv_event_gaps_total",
			"Skipped KV event sequence numbers (lost events): the worker's view was cleared and its stream restarted from scratch."),
		resets: perWorker("kvgate_kv_event_resets_total",
			"Engine restarts seen on a resumed KV event stream (numbers that went backwards, or another batch under the last number applied): the worker's view was cleared."),
		resyncs: perWorker("kvgate_kv_event_resyncs_total",
			"KV event streams restarted from scratch because the engine could not replay what was missed (OUT_OF_RANGE, DATA_LOSS)."),
		duplicates: perWorker("kvgate_kv_event_duplicates_total",
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

// Hooks returns the hooks a KVSubscriptions feeds (KVSubscriptionsConfig's
// Metrics).
func (k *KVEventCounters) Hooks() KVEventMetrics {
	// The applied series are looked up once here, not per batch: a label
	// lookup hashes the value and takes the vector's lock, several times
	// the cost of the Add, for every batch of every engine.
	var applied [KVCleared + 1]prometheus.Counter
	for kind := KVStored; kind <= KVCleared; kind++ {
		applied[kind] = k.applied.WithLabelValues(kind.String())
	}
	return KVEventMetrics{
		Applied: func(_ string, kind KVEventKind, n int) {
			if int(kind) < len(applied) && applied[kind] != nil {
				applied[kind].Add(float64(n))
				return
			}
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

func (k *KVEventCounters) collectors() []prometheus.Collector {
	return []prometheus.Collector{k.applied, k.gaps, k.resets, k.resyncs, k.duplicates, k.failures, k.lag}
}

// Describe implements prometheus.Collector.
func (k *KVEventCounters) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range k.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (k *KVEventCounters) Collect(ch chan<- prometheus.Metric) {
	for _, c := range k.collectors() {
		c.Collect(ch)
	}
}

// NewKVModeCollector reports, at scrape time, whether each of reg's workers'
// cache is mirrored from its KV events. status may be nil (no
// subscriptions: every worker's cache is approximated).
func NewKVModeCollector(reg *Registry, status KVStatuser) prometheus.Collector {
	return kvModeCollector{reg: reg, status: status}
}

type kvModeCollector struct {
	reg    *Registry
	status KVStatuser
}

var descKVEventMode = prometheus.NewDesc("kvgate_worker_kv_events",
	"1 when the router's view of the worker's cache follows its KV events, 0 when it is approximated (no events, or not yet).",
	[]string{"worker"}, nil)

func (kvModeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descKVEventMode }

func (c kvModeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, w := range c.reg.Snapshot() {
		v := 0.0
		if c.status != nil {
			if st, ok := c.status.Status(w.URL()); ok && st.Mode == KVModeEvents {
				v = 1
			}
		}
		ch <- prometheus.MustNewConstMetric(descKVEventMode, prometheus.GaugeValue, v, w.URL())
	}
}

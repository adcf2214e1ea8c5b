package policy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/tree"
)

// TreeStatser is implemented by policies that keep a token tree.
type TreeStatser interface{ TreeStats() tree.Stats }

// speculationStatser is implemented by policies whose speculative cache
// entries expire (cache_aware).
type speculationStatser interface{ SpeculativeExpired() uint64 }

// missStatser is implemented by policies that count why their cache
// predictions missed (cache_aware, vllm_cache_aware).
type missStatser interface{ PredictionMisses() map[string]uint64 }

var (
	_ missStatser = (*CacheAware)(nil)
	_ missStatser = (*VllmCacheAware)(nil)
)

// eventStatser is implemented by the policies that mirror the engines'
// caches from their KV events (cache_aware, vllm_cache_aware).
type eventStatser interface{ EventStats() EventStats }

// Served is one model's main policy, as Collector reads it.
type Served struct {
	Model  string
	Policy Policy
}

// Collector reports, at scrape time, what the policies hold: each model's
// routing tree, the speculative entries that expired unconfirmed, and the
// KV event blocks their mirrors' bounds dropped. served lists the models'
// main policies at each scrape, so policies added or replaced while the
// router runs are read without registering anything again.
type Collector struct{ served func() []Served }

// NewCollector returns a Collector over served.
func NewCollector(served func() []Served) *Collector { return &Collector{served: served} }

// kvDropReasons are the reasons EventStats.Dropped counts, each exported
// from the start so that a rate over it is defined before a bound first
// bites.
var kvDropReasons = []string{"rank", "detached", "overflow"}

var (
	// descTreeSize is SMG's smg_router_cache_tree_size, in the unit of
	// kvgate's --max-tree-size (tokens), so SMG's documented alert (above 90% of
	// the maximum) holds with the prefix changed.
	descTreeSize = prometheus.NewDesc("kvgate_router_cache_tree_size",
		"The routing tree's size in the unit --max-tree-size bounds: stored tokens (SMG's smg_router_cache_tree_size).", []string{"model"}, nil)
	descTreeBudget = prometheus.NewDesc("kvgate_tree_max_tokens",
		"The routing tree's budget in stored tokens (--max-tree-size): divide kvgate_router_cache_tree_size by it for the share used.", []string{"model"}, nil)
	descTreeTokens = prometheus.NewDesc("kvgate_tree_tokens",
		"Tokens stored in the routing tree.", []string{"model"}, nil)
	descTreeNodes = prometheus.NewDesc("kvgate_tree_nodes",
		"Nodes in the routing tree.", []string{"model"}, nil)
	descTreeWorkerTokens = prometheus.NewDesc("kvgate_tree_worker_tokens",
		"Tokens the routing tree holds for each worker.", []string{"model", "worker"}, nil)
	descSpeculativeExpired = prometheus.NewDesc("kvgate_cache_speculative_expired_total",
		"Routing decisions whose speculative cache entries expired unconfirmed on workers with KV events: the engine did not store what the router expected.",
		nil, nil)
	descPredictionMisses = prometheus.NewDesc("kvgate_cache_prediction_misses_total",
		"Completed requests whose predicted cached tokens differed from the engine's report, by cause: speculation (the router's unconfirmed pages were missing), evicted (pages the KV events had confirmed were gone at admission: events late, or evicted while the request waited in the engine), unseen (the engine held more than the router knew), boundary (a partial page, or the prompt's last page), over_report (more than the prompt), queued (fewer than predicted on an engine already at its running-request limit at the decision: evicted while the request waited in its queue).",
		[]string{"cause"}, nil)
	descKVBlocksDropped = prometheus.NewDesc("kvgate_kv_event_blocks_dropped_total",
		"Blocks of the engines' KV events a bound of the router's cache mirror dropped, by reason: rank (a data-parallel rank the fleet is not configured with), detached (blocks that never attached, past their bound), overflow (a worker's mirror reset past its bound).",
		[]string{"reason"}, nil)
)

// Describe implements prometheus.Collector.
func (*Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTreeBudget, descTreeSize, descTreeTokens, descTreeNodes, descTreeWorkerTokens,
		descSpeculativeExpired, descPredictionMisses, descKVBlocksDropped} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	served := c.served()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, s := range served {
		t, ok := s.Policy.(TreeStatser)
		if !ok {
			continue
		}
		st := t.TreeStats()
		gauge(descTreeBudget, float64(st.MaxTokens), s.Model)
		gauge(descTreeSize, float64(st.Tokens), s.Model)
		gauge(descTreeTokens, float64(st.Tokens), s.Model)
		gauge(descTreeNodes, float64(st.Nodes), s.Model)
		for w, n := range st.TenantTokens {
			gauge(descTreeWorkerTokens, float64(n), s.Model, w)
		}
	}
	expired, speculates := 0.0, false
	misses, predicts := map[string]uint64{}, false
	dropped, mirrors := map[string]uint64{}, false
	for _, s := range served {
		if sp, ok := s.Policy.(speculationStatser); ok {
			expired, speculates = expired+float64(sp.SpeculativeExpired()), true
		}
		if ms, ok := s.Policy.(missStatser); ok {
			predicts = true
			for cause, n := range ms.PredictionMisses() {
				misses[cause] += n
			}
		}
		if ev, ok := s.Policy.(eventStatser); ok {
			mirrors = true
			for reason, n := range ev.EventStats().Dropped {
				dropped[reason] += n
			}
		}
	}
	if speculates {
		ch <- prometheus.MustNewConstMetric(descSpeculativeExpired, prometheus.CounterValue, expired)
	}
	if predicts {
		for _, cause := range MissCauses() {
			ch <- prometheus.MustNewConstMetric(descPredictionMisses, prometheus.CounterValue, float64(misses[cause.String()]), cause.String())
		}
	}
	if mirrors {
		for _, reason := range kvDropReasons {
			ch <- prometheus.MustNewConstMetric(descKVBlocksDropped, prometheus.CounterValue, float64(dropped[reason]), reason)
		}
	}
}

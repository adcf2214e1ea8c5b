package cache

import "github.com/prometheus/client_golang/prometheus"

// Collector reports tokenizer caches' counters at scrape time, summed over
// the caches stats returns (one per model served; none: no series).
type Collector struct{ stats func() []Stats }

// NewCollector returns a Collector over the caches stats lists at each
// scrape.
func NewCollector(stats func() []Stats) *Collector { return &Collector{stats: stats} }

var (
	descCacheHits = prometheus.NewDesc("kvgate_tokenizer_cache_hits_total",
		"Tokenizer cache hits, by level (l0: exact text, l1: prefix at a special-token boundary).", []string{"level"}, nil)
	descCacheMisses = prometheus.NewDesc("kvgate_tokenizer_cache_misses_total",
		"Tokenizer cache misses, by level.", []string{"level"}, nil)
	descCacheEntries = prometheus.NewDesc("kvgate_tokenizer_cache_entries",
		"Entries in the tokenizer cache, by level.", []string{"level"}, nil)
	descCacheBytes = prometheus.NewDesc("kvgate_tokenizer_cache_bytes",
		"Memory the tokenizer cache accounts for (text, ids and per-entry overhead), by level.", []string{"level"}, nil)
	descCacheHitBytes = prometheus.NewDesc("kvgate_tokenizer_cache_l1_hit_bytes_total",
		"Prompt bytes served from the L1 cache instead of being tokenized.", nil, nil)
)

// Describe implements prometheus.Collector.
func (*Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCacheHits, descCacheMisses, descCacheEntries, descCacheBytes, descCacheHitBytes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	all := c.stats()
	if len(all) == 0 {
		return // no tokenizer: no tokenizer caches
	}
	var s Stats
	for _, t := range all {
		s.L0Hits, s.L0Misses, s.L0Entries, s.L0Bytes = s.L0Hits+t.L0Hits, s.L0Misses+t.L0Misses, s.L0Entries+t.L0Entries, s.L0Bytes+t.L0Bytes
		s.L1Hits, s.L1Misses, s.L1Entries, s.L1Bytes = s.L1Hits+t.L1Hits, s.L1Misses+t.L1Misses, s.L1Entries+t.L1Entries, s.L1Bytes+t.L1Bytes
		s.L1HitBytes += t.L1HitBytes
	}
	for _, l := range []struct {
		level          string
		hits, misses   uint64
		entries, bytes float64
	}{
		{"l0", s.L0Hits, s.L0Misses, float64(s.L0Entries), float64(s.L0Bytes)},
		{"l1", s.L1Hits, s.L1Misses, float64(s.L1Entries), float64(s.L1Bytes)},
	} {
		ch <- prometheus.MustNewConstMetric(descCacheHits, prometheus.CounterValue, float64(l.hits), l.level)
		ch <- prometheus.MustNewConstMetric(descCacheMisses, prometheus.CounterValue, float64(l.misses), l.level)
		ch <- prometheus.MustNewConstMetric(descCacheEntries, prometheus.GaugeValue, l.entries, l.level)
		ch <- prometheus.MustNewConstMetric(descCacheBytes, prometheus.GaugeValue, l.bytes, l.level)
	}
	ch <- prometheus.MustNewConstMetric(descCacheHitBytes, prometheus.CounterValue, float64(s.L1HitBytes))
}

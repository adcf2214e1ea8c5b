package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvgate/kvgate/policy"
)

// predictionMisses reads the routers' kvgate_cache_prediction_misses_total
// by cause, summed over the replicas, and the engines' count of requests
// whose prefix was evicted while they waited in the engine's queue (the
// simulator's truth, which splits the router's "evicted" cause into the
// evictions it could not have seen at its decision and the rest). It also
// reads how many requests reached an engine at its running limit (they
// waited in the engine, not in the router) and the KV events' lag, engine
// stamp to router receipt (kvgate_kv_event_lag_seconds, over the replicas):
// the two windows in which an engine evicts what the router predicted.
// Nil when no router predicted.
func (f *Testbed) predictionMisses() *Misses {
	m := &Misses{ByCause: map[string]int{}}
	seen := false
	var lags []*dto.Histogram
	for _, g := range f.routers {
		mfs, err := g.Server.Metrics().Registry.Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			switch mf.GetName() {
			case "kvgate_cache_prediction_misses_total":
				seen = true
				for _, mt := range mf.GetMetric() {
					for _, l := range mt.GetLabel() {
						if l.GetName() == "cause" {
							m.ByCause[l.GetValue()] += int(mt.GetCounter().GetValue())
						}
					}
				}
			case "kvgate_kv_event_lag_seconds":
				for _, mt := range mf.GetMetric() {
					lags = append(lags, mt.GetHistogram())
				}
			}
		}
	}
	if !seen {
		return nil
	}
	for _, s := range f.sims {
		st := s.Engine().Stats()
		m.EngineQueueShrunk += int(st.QueueShrunk)
		m.EngineQueuedFull += int(st.QueuedFull)
	}
	if h := mergeHistograms(lags); h != nil && h.GetSampleCount() > 0 {
		m.EventLag = &Lag{P50: seconds(histogramQuantile(h, 0.5)), P99: seconds(histogramQuantile(h, 0.99))}
	}
	return m
}

// Misses is why a run's cache predictions missed.
type Misses struct {
	// ByCause counts the missed predictions by the router's cause
	// (policy.MissCause).
	ByCause map[string]int `json:"by_cause"`
	// EngineQueueShrunk counts the requests the engines admitted with
	// fewer cached tokens than they held for them on arrival: evicted
	// while queued in the engine.
	EngineQueueShrunk int `json:"engine_queue_shrunk"`
	// EngineQueuedFull counts the requests that reached an engine while it
	// ran its limit of requests, and so waited in its queue.
	EngineQueuedFull int `json:"engine_queued_full"`
	// EventLag is the KV events' lag from the engine's stamp to the
	// router's receipt, when any was measured.
	EventLag *Lag `json:"kv_event_lag,omitempty"`
}

// Lag is a lag's median and 99th percentile, read from a histogram's
// buckets (so as coarse as they are).
type Lag struct {
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
}

// writeMisses prints, for each run that predicted and missed, its misses by
// cause.
func writeMisses(w io.Writer, runs []PolicyRun) {
	for _, r := range runs {
		if r.Misses == nil || r.Requests == 0 {
			continue
		}
		var parts []string
		total := 0
		for _, c := range policy.MissCauses() {
			n := r.Misses.ByCause[c.String()]
			total += n
			if n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d (%.3f)", c, n, float64(n)/float64(r.Requests)))
			}
		}
		if total == 0 {
			continue
		}
		fmt.Fprintf(w, "%s: prediction misses %d: %s; requests the engines admitted after evicting part of their prefix while queued: %d",
			r.Policy, total, strings.Join(parts, ", "), r.Misses.EngineQueueShrunk)
		if n := r.Misses.EngineQueuedFull; n > 0 {
			fmt.Fprintf(w, "; requests that reached an engine at its running limit: %d", n)
		}
		if l := r.Misses.EventLag; l != nil {
			fmt.Fprintf(w, "; KV event lag p50 %.1f ms, p99 %.1f ms", ms(l.P50), ms(l.P99))
		}
		fmt.Fprintln(w)
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// mergeHistograms adds histograms of the same buckets (the replicas' lags);
// nil when there are none.
func mergeHistograms(hs []*dto.Histogram) *dto.Histogram {
	if len(hs) == 0 {
		return nil
	}
	out := &dto.Histogram{SampleCount: new(uint64)}
	for _, b := range hs[0].GetBucket() {
		out.Bucket = append(out.Bucket, &dto.Bucket{UpperBound: new(float64), CumulativeCount: new(uint64)})
		*out.Bucket[len(out.Bucket)-1].UpperBound = b.GetUpperBound()
	}
	for _, h := range hs {
		*out.SampleCount += h.GetSampleCount()
		for i, b := range h.GetBucket() {
			if i < len(out.Bucket) {
				*out.Bucket[i].CumulativeCount += b.GetCumulativeCount()
			}
		}
	}
	return out
}

// histogramQuantile is the q-quantile of h as Prometheus's
// histogram_quantile estimates it: linear within the bucket that holds it,
// the highest finite bound when it falls beyond them; NaN when h is empty.
func histogramQuantile(h *dto.Histogram, q float64) float64 {
	total := float64(h.GetSampleCount())
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for _, b := range h.GetBucket() {
		upper, cum := b.GetUpperBound(), float64(b.GetCumulativeCount())
		if cum >= rank {
			if cum == below {
				return upper
			}
			return lower + (upper-lower)*(rank-below)/(cum-below)
		}
		lower, below = upper, cum
	}
	return lower
}

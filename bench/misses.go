package bench

import (
	"fmt"
	"io"
	"strings"

	"github.com/kvgate/kvgate/policy"
)

// predictionMisses reads the routers' kvgate_cache_prediction_misses_total
// by cause, summed over the replicas, and the engines' count of requests
// whose prefix was evicted while they waited in the engine's queue (the
// simulator's truth, which splits the router's "evicted" cause into the
// evictions it could not have seen at its decision and the rest). Nil when
// no router predicted.
func (f *Testbed) predictionMisses() *Misses {
	m := &Misses{ByCause: map[string]int{}}
	seen := false
	for _, g := range f.routers {
		mfs, err := g.Server.Metrics().Registry.Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			if mf.GetName() != "kvgate_cache_prediction_misses_total" {
				continue
			}
			seen = true
			for _, mt := range mf.GetMetric() {
				for _, l := range mt.GetLabel() {
					if l.GetName() == "cause" {
						m.ByCause[l.GetValue()] += int(mt.GetCounter().GetValue())
					}
				}
			}
		}
	}
	if !seen {
		return nil
	}
	for _, s := range f.sims {
		m.EngineQueueShrunk += int(s.Engine().Stats().QueueShrunk)
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
		fmt.Fprintf(w, "%s: prediction misses %d: %s; requests the engines admitted after evicting part of their prefix while queued: %d\n",
			r.Policy, total, strings.Join(parts, ", "), r.Misses.EngineQueueShrunk)
	}
}

package bench

import (
	"math"
	"slices"
)

// oraclePage is the page size the oracle aligns prefixes to: the simulated
// engines' and SGLang's default KV page.
const oraclePage = 16

// Summary is the distribution of a latency, in milliseconds.
type Summary struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Mean float64 `json:"mean"`
}

// Summarize returns the percentiles (nearest rank) and mean of xs; all zero
// when xs is empty.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	return Summary{
		P50:  Percentile(s, 50),
		P90:  Percentile(s, 90),
		P99:  Percentile(s, 99),
		Mean: sum / float64(len(s)),
	}
}

// SentSummary is a latency's percentiles over every request sent, where
// a failed request counts as slower than any that succeeded. Under overload
// the router refuses requests that waited --queue-timeout-secs, and a rule
// that refuses more would look faster in Summary, which counts only the
// requests it served. A percentile that falls on a failure is null.
type SentSummary struct {
	P50 *float64 `json:"p50"`
	P90 *float64 `json:"p90"`
	P99 *float64 `json:"p99"`
}

// summarizeSent is SentSummary of sorted, the successes' latencies, out of
// sent requests (sent ≥ len(sorted)).
func summarizeSent(sorted []float64, sent int) SentSummary {
	at := func(p float64) *float64 {
		rank := nearestRank(p, sent)
		if rank > len(sorted) {
			return nil
		}
		v := sorted[rank-1]
		return &v
	}
	return SentSummary{P50: at(50), P90: at(90), P99: at(99)}
}

// Percentile returns the nearest-rank p-th percentile of sorted xs: the
// smallest value with at least p% of the values at or below it.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(nearestRank(p, len(sorted)), len(sorted))-1]
}

// nearestRank is the 1-based rank of the p-th percentile of n values: the
// smallest with at least p% of the n at or below it (1 for n = 0).
func nearestRank(p float64, n int) int {
	return max(int(math.Ceil(p/100*float64(n))), 1)
}

// CoV is the coefficient of variation (population standard deviation over the
// mean) of counts; 0 when the mean is 0.
func CoV(counts []int) float64 {
	if len(counts) == 0 {
		return 0
	}
	mean := 0.0
	for _, c := range counts {
		mean += float64(c)
	}
	mean /= float64(len(counts))
	if mean == 0 {
		return 0
	}
	v := 0.0
	for _, c := range counts {
		d := float64(c) - mean
		v += d * d
	}
	return math.Sqrt(v/float64(len(counts))) / mean
}

// Oracle computes the oracle hit rate: what an engine with an unlimited cache
// shared by the whole fleet would report. Each prompt is matched against every
// sequence cached before it, page-aligned; after it, the prompt (and, where
// given, its output but the last token, which an engine never computes KV
// for) is cached. Pages are kept as chained 64-bit hashes (each page's hash
// covers everything before it), as engines' block hashes are.
type Oracle struct {
	pages         map[uint64]struct{}
	cached, total int
}

// pageHashes calls yield with the chained hash of each whole page of seq
// until yield returns false.
func pageHashes(seq []uint32, yield func(uint64) bool) {
	h := uint64(0x84222325cbf29ce4)
	for i := 0; i+oraclePage <= len(seq); i += oraclePage {
		for _, t := range seq[i : i+oraclePage] {
			h = mix64(h ^ (uint64(t) + 0x9e3779b97f4a7c15))
		}
		if !yield(h) {
			return
		}
	}
}

// Match returns the page-aligned length of the longest prefix of prompt that
// was cached earlier, and counts it.
func (o *Oracle) Match(prompt []uint32) int {
	matched := 0
	pageHashes(prompt, func(h uint64) bool {
		if _, ok := o.pages[h]; !ok {
			return false
		}
		matched += oraclePage
		return true
	})
	o.cached += matched
	o.total += len(prompt)
	return matched
}

// Insert caches seq's whole pages.
func (o *Oracle) Insert(seq []uint32) {
	if o.pages == nil {
		o.pages = map[uint64]struct{}{}
	}
	pageHashes(seq, func(h uint64) bool {
		o.pages[h] = struct{}{}
		return true
	})
}

// Observe matches prompt, then caches it with its output.
func (o *Oracle) Observe(prompt, output []uint32) {
	o.Match(prompt)
	o.Insert(prompt)
	if len(output) > 1 {
		seq := make([]uint32, 0, len(prompt)+len(output)-1)
		seq = append(append(seq, prompt...), output[:len(output)-1]...)
		o.Insert(seq)
	}
}

// Rate is cached over total prompt tokens so far.
func (o *Oracle) Rate() float64 {
	if o.total == 0 {
		return 0
	}
	return float64(o.cached) / float64(o.total)
}

func sortedCopy(xs []float64) []float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s
}

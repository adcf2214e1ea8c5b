package policy

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/workers"
)

// Bucket routes by prompt length: the healthy candidates, in order, each
// take one band of lengths, shortest band first, so that a prefill worker
// sees prompts of similar size (which batch well) and long prompts do not
// queue behind short ones. Branches: "bucket", "imbalance".
//
// The bands are chosen so that each worker gets an equal share of the
// prompt tokens. A prompt's place is its position in the recent token mass:
// the share of recent prompt tokens that came in shorter prompts, plus half
// the share of prompts of exactly its length. With n healthy workers, the
// prompt at position p goes to band ⌊p·n⌋. Before any traffic has been
// measured, lengths are taken as spread evenly over 0 to 4096 tokens (SMG's
// initial range): with two workers the boundary is 2048 tokens.
//
// Adjustment (every BucketAdjustInterval, by Run): the prompt lengths seen
// since the last adjustment (a uniform sample of at most 16384 of them)
// replace the distribution that positions are read from, which moves the
// boundaries to where the recent traffic splits into equal token shares. An
// interval with fewer than 32 prompts keeps the old boundaries and carries
// its prompts into the next, so that a quiet fleet's boundaries do not jump
// with every handful of requests. Because positions are shares, the same
// distribution serves any number of workers, and a worker joining or going
// unhealthy changes the bands at once.
//
// Bands equalize tokens over an interval but cannot see a burst, so when the
// fleet is imbalanced now — max_load − min_load > BalanceAbsThreshold and
// max_load > BalanceRelThreshold × min_load, loads as Worker.Load counts them
// (BucketConfig; default thresholds 32 and 1.0001) — the least loaded worker takes the
// request. SMG measures the imbalance in prompt length routed to each worker
// over the interval instead; the bands already balance that, and in-flight
// load is what a burst shows up in.
//
// DryRun requests are neither counted nor sampled.
type Bucket struct {
	abs      int
	rel      float64
	interval time.Duration
	intn     Intn

	dist atomic.Pointer[lengthDist] // nil until the first adjustment

	mu     sync.Mutex
	sample []int // prompt lengths since the last adjustment (reservoir)
	seen   int   // prompts since the last adjustment
}

const (
	// bucketColdSpan is the length range assumed before any traffic.
	bucketColdSpan = 4096
	// bucketSampleCap bounds the lengths kept per interval.
	bucketSampleCap = 1 << 14
	// bucketMinSample is the fewest prompts an adjustment will act on.
	bucketMinSample = 32
)

// NewBucket returns a bucket policy configured by o.Bucket, or its
// validation error.
func NewBucket(o Options) (*Bucket, error) {
	c := o.Bucket
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &Bucket{abs: c.BalanceAbsThreshold, rel: c.BalanceRelThreshold, interval: c.AdjustInterval, intn: orDefault(o.Intn)}, nil
}

func (*Bucket) Name() string { return "bucket" }

// Select places the request in its length band; see Bucket.
func (b *Bucket) Select(_ context.Context, req *Request, candidates []workers.View) (Decision, error) {
	ws := healthy(req, candidates)
	if len(ws) == 0 {
		return Decision{}, ErrNoHealthyWorker
	}
	n := len(req.InputIDs)
	if !req.DryRun {
		b.record(n)
	}
	least, minLoad, maxLoad := ws[0], ws[0].Load(), ws[0].Load()
	for _, w := range ws[1:] {
		l := w.Load()
		if l < minLoad {
			least, minLoad = w, l
		}
		maxLoad = max(maxLoad, l)
	}
	if maxLoad-minLoad > b.abs && float64(maxLoad) > b.rel*float64(minLoad) {
		return Decision{Worker: least.Worker(), Branch: "imbalance",
			Reason: fmt.Sprintf("bucket: imbalanced (load %d to %d), least loaded", minLoad, maxLoad)}, nil
	}
	p := b.dist.Load().position(n)
	i := bandOf(p, len(ws))
	return Decision{Worker: ws[i].Worker(), Branch: "bucket",
		Reason: fmt.Sprintf("bucket: %d-token prompt at %.0f%% of recent prompt tokens, band %d of %d", n, 100*p, i+1, len(ws))}, nil
}

// record adds a prompt length to the interval's sample: all of them up to
// the cap, then a uniform sample (reservoir sampling).
func (b *Bucket) record(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seen++
	if len(b.sample) < bucketSampleCap {
		b.sample = append(b.sample, n)
	} else if j := b.intn(b.seen); j < bucketSampleCap {
		b.sample[j] = n
	}
}

// Adjust moves the boundaries to the lengths seen since the last adjustment
// and reports whether it did; see Bucket. Run calls it every interval.
func (b *Bucket) Adjust() bool {
	b.mu.Lock()
	if b.seen < bucketMinSample {
		b.mu.Unlock()
		return false
	}
	lens := b.sample
	b.sample, b.seen = nil, 0
	b.mu.Unlock()

	slices.Sort(lens)
	d := &lengthDist{lens: lens, cum: make([]int64, len(lens))}
	var sum int64
	for i, l := range lens {
		sum += tokenWeight(l)
		d.cum[i] = sum
	}
	b.dist.Store(d)
	return true
}

// Boundaries returns the n−1 lengths at which the bands of n workers begin:
// a prompt of Boundaries(n)[i-1] tokens or more, and fewer than
// Boundaries(n)[i], goes to band i (counting from 0).
func (b *Bucket) Boundaries(n int) []int {
	d := b.dist.Load()
	hi := bucketColdSpan
	if d != nil {
		hi = d.lens[len(d.lens)-1] + 1
	}
	out := make([]int, 0, max(n-1, 0))
	for i := 1; i < n; i++ {
		out = append(out, sort.Search(hi+1, func(l int) bool { return bandOf(d.position(l), n) >= i }))
	}
	return out
}

// Run adjusts the boundaries every BucketAdjustInterval until ctx ends.
func (b *Bucket) Run(ctx context.Context) {
	t := time.NewTicker(b.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			b.Adjust()
		}
	}
}

// lengthDist is a sample of prompt lengths, sorted, with the running total
// of their tokens. It is immutable once built.
type lengthDist struct {
	lens []int
	cum  []int64 // cum[i]: tokens in lens[0..i]
}

// tokenWeight is what a prompt of n tokens counts for: its tokens, and at
// least 1 so that empty prompts still count as requests.
func tokenWeight(n int) int64 { return int64(max(n, 1)) }

// position is the share, in [0, 1], of the sample's tokens in prompts shorter
// than n plus half the share in prompts of n tokens. A nil distribution
// spreads lengths evenly over [0, bucketColdSpan).
func (d *lengthDist) position(n int) float64 {
	if d == nil {
		return min(1, float64(n)/bucketColdSpan)
	}
	at := func(i int) int64 { // tokens in lens[:i]
		if i == 0 {
			return 0
		}
		return d.cum[i-1]
	}
	lo, hi := at(sort.SearchInts(d.lens, n)), at(sort.SearchInts(d.lens, n+1))
	return (float64(lo) + float64(hi-lo)/2) / float64(d.cum[len(d.cum)-1])
}

// bandOf is the band, of n, holding position p.
func bandOf(p float64, n int) int { return min(n-1, int(p*float64(n))) }

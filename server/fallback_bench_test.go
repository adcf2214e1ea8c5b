package server_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers/sim"
)

// BenchmarkCacheMissFallback compares cache_aware's two fallbacks for a cache
// miss in the situation that tells them apart: a worker whose tree is small
// (it restarted, or joined a warm fleet) when a burst of new prefixes
// arrives. smallest_tree (SMG's "most cache capacity") sends the whole
// burst to it; least_loaded spreads the burst by load. Each request then
// repeats twice, so the hit ratio shows what each fallback does to locality.
//
// The engines are simulated (an 8B model on one H100, delays scaled by 0.1).
//
//	go test -run '^$' -bench CacheMissFallback -benchtime 3x ./server/
func BenchmarkCacheMissFallback(b *testing.B) {
	for _, fallback := range []string{"smallest_tree", "least_loaded"} {
		b.Run(fallback, func(b *testing.B) {
			var ttft, p99, share, hit float64
			for range b.N {
				r := missBurst(b, fallback)
				ttft += r.meanTTFT
				p99 += r.p99TTFT
				share += r.busiestShare
				hit += r.hitRatio
			}
			n := float64(b.N)
			b.ReportMetric(ttft/n, "burst-ttft-ms")
			b.ReportMetric(p99/n, "burst-p99-ttft-ms")
			b.ReportMetric(share/n, "busiest-share")
			b.ReportMetric(hit/n, "repeat-hit-ratio")
		})
	}
}

type burstResult struct {
	meanTTFT, p99TTFT float64 // ms, during the burst
	busiestShare      float64 // fraction of the burst on the busiest worker
	hitRatio          float64 // cached / prompt tokens over the repeats
}

func missBurst(b *testing.B, fallback string) burstResult {
	const (
		workers   = 4
		warm      = 48 // distinct prefixes served before the burst, by workers 0-2
		burst     = 32 // new prefixes arriving at once
		prefixLen = 2048
	)
	f := startFleet(b, fleetOptions{workers: workers, policy: "cache_aware",
		options: func(o *policy.Options) { o.CacheAware.CacheMissFallback = fallback },
		sim: func(_ int, c *sim.Config) {
			c.TimeScale = 0.1
			c.PageSize = 16
			c.TokenizerDir = "none" // ids up to 112,000: a Llama-3-sized vocabulary
			c.VocabSize = 128256
			c.EOSTokenID = 128001
			c.Logger = slog.New(slog.DiscardHandler)
		}})
	req := func(group, variant int) *kvgatev1.GenerateRequest {
		ids := prompt(uint32(group*prefixLen%100000), prefixLen)
		ids = append(ids, prompt(uint32(110000+variant*64), 64)...)
		return &kvgatev1.GenerateRequest{InputIds: ids, Stream: true,
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(16), IgnoreEos: true}}
	}
	// Warm workers 0-2 while worker 3 is out of rotation, as if it restarted.
	w3, _ := f.reg.Get(f.workerURL(3))
	w3.SetHealthy(false)
	parallel(b, warm, func(i int) { f.mustGenerate(b, req(i, 0)) })
	w3.SetHealthy(true)

	// The burst: new prefixes, all at once; time to first token of each.
	ttfts := make([]float64, burst)
	placed := make([]string, burst)
	parallel(b, burst, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		st, err := f.router.Generate(ctx, req(1000+i, 0))
		if err != nil {
			b.Error(err)
			return
		}
		first := true
		for {
			m, err := st.Recv()
			if err != nil {
				break
			}
			if first && m.GetChunk() != nil {
				ttfts[i] = float64(time.Since(start).Microseconds()) / 1000
				first = false
			}
			if c := m.GetComplete(); c != nil {
				placed[i] = c.Worker
			}
		}
	})
	per := map[string]int{}
	for _, w := range placed {
		per[w]++
	}
	busiest := 0
	for _, n := range per {
		busiest = max(busiest, n)
	}
	// The repeats: each burst prefix twice more, with a new suffix.
	var cached, total float64
	var mu sync.Mutex
	parallel(b, 2*burst, func(i int) {
		c := f.mustGenerate(b, req(1000+i%burst, 1+i/burst)).complete
		mu.Lock()
		cached += float64(c.Usage.CachedTokens)
		total += float64(c.Usage.PromptTokens)
		mu.Unlock()
	})
	slices.Sort(ttfts)
	mean := 0.0
	for _, t := range ttfts {
		mean += t
	}
	return burstResult{
		meanTTFT:     mean / burst,
		p99TTFT:      ttfts[len(ttfts)*99/100],
		busiestShare: float64(busiest) / burst,
		hitRatio:     cached / total,
	}
}

// parallel runs fn(0..n-1) concurrently and waits.
func parallel(b *testing.B, n int, fn func(i int)) {
	b.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i)
		}()
	}
	wg.Wait()
}

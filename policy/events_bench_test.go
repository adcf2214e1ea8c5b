package policy_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// engineTraffic is the event stream of an engine serving prompts of
// promptTokens: per prompt, a shared 1,024-token system prompt the engine
// already holds, then new pages stored one event per page (as engines
// publish them), and, once the engine is full, the pages of the prompt
// stored keep prompts earlier removed. It returns one batch per prompt.
func engineTraffic(prompts, promptTokens, keep int) []*workers.KVEventBatch {
	const page = 16
	system := caTokens(1, 1024)
	batches := []*workers.KVEventBatch{batch(0, engineChain(system, page, 1, nil)...)}
	var stored [][]int64 // hashes of each prompt's own pages
	next := int64(1_000)
	for i := range prompts {
		own := caTokens(i+2, promptTokens-len(system))
		parent := int64(len(system) / page) // the system prompt's last hash
		evs := engineChain(own, page, next, &parent)
		var hashes []int64
		for j := range evs {
			hashes = append(hashes, next+int64(j))
		}
		next += int64(len(evs))
		stored = append(stored, hashes)
		if len(stored) > keep {
			old := stored[0]
			stored = stored[1:]
			evs = append(evs, removed(old...))
		}
		batches = append(batches, batch(uint64(i+1), evs...))
	}
	return batches
}

func countEvents(bs []*workers.KVEventBatch) (n int) {
	for _, b := range bs {
		n += len(b.Events)
	}
	return n
}

// BenchmarkApplyKVEvents measures how many KV events one router absorbs:
// engines serving 2K- and 8K-token prompts, one stored event per page and
// removals of old prompts once their caches are full, spread over 8
// workers.
func BenchmarkApplyKVEvents(b *testing.B) {
	for _, tokens := range []int{2048, 8192} {
		b.Run(fmt.Sprintf("prompt=%d", tokens), func(b *testing.B) {
			ws := fleet(8)
			traffic := engineTraffic(200, tokens, 50)
			perPass := countEvents(traffic)
			events := 0
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				p := mustCA(b)
				b.StartTimer()
				for _, w := range ws {
					for _, bt := range traffic {
						p.ApplyKVEvents(w.URL(), bt)
					}
				}
				events += len(ws) * perPass
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkSelectUnderKVEvents measures cache_aware's selection at 8K
// tokens over 8 workers alone and while another goroutine applies engines'
// events as fast as it can: the cost events add to routing.
func BenchmarkSelectUnderKVEvents(b *testing.B) {
	for _, busy := range []bool{false, true} {
		b.Run(fmt.Sprintf("events=%v", busy), func(b *testing.B) {
			ws := fleet(8)
			p := mustCA(b)
			traffic := engineTraffic(100, 8192, 30)
			for _, w := range ws {
				p.SetKVEventMode(w.URL(), true)
				for _, bt := range traffic[:40] {
					p.ApplyKVEvents(w.URL(), bt)
				}
			}
			req := &policy.Request{InputIDs: caJoin(caTokens(1, 1024), caTokens(30, 7168)), DryRun: true}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var applied atomic.Int64
			if busy {
				// Workers 1..7 replay their engines' traffic from a reset
				// over and over, so every event does real work; worker 0,
				// the one the prompt matches, keeps its pages.
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						w := ws[1+i%(len(ws)-1)].URL()
						k := (i / (len(ws) - 1)) % len(traffic)
						if k == 0 {
							p.ResetKVEvents(w, 0)
						}
						p.ApplyKVEvents(w, traffic[k])
						applied.Add(int64(len(traffic[k].Events)))
					}
				})
			}
			start := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Select(context.Background(), req, workers.Views(ws)); err != nil {
					b.Fatal(err)
				}
			}
			close(stop)
			wg.Wait()
			if busy {
				b.ReportMetric(float64(applied.Load())/time.Since(start).Seconds(), "events/s")
			}
		})
	}
}

func mustCA(b testing.TB) *policy.CacheAware {
	b.Helper()
	p, err := policy.NewCacheAware(policy.DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	return p
}

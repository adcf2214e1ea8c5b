package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/workers/sim"
)

// BenchmarkRequestPath sends Generate requests of fresh token ids (1 output
// token) through a cache_aware router to one simulated engine with no
// delays, all in this process. Its allocations per request cover the client,
// the router and the engine, so they are an upper bound on the router's;
// they are the figure the request path's allocation fixes are measured by
// (BENCHMARKS.md, "Router overhead"), and with -cpuprofile/-memprofile its
// profile shows where the router's share goes:
//
//	go test -run '^$' -bench RequestPath -benchmem -memprofile mem.out ./server/
func BenchmarkRequestPath(b *testing.B) {
	for _, n := range []int{1024, 8192} {
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			f := startFleet(b, fleetOptions{workers: 1, policy: "cache_aware", sim: func(_ int, c *sim.Config) {
				c.KVCapacityTokens = 1 << 20
				c.TokenizerDir, c.VocabSize, c.EOSTokenID = "none", 128256, 128001
			}})
			// Distinct prompts (a miss, then an insertion in the tree), made
			// before the clock starts.
			const pool = 64
			reqs := make([]*kvgatev1.GenerateRequest, pool)
			for i := range reqs {
				reqs[i] = &kvgatev1.GenerateRequest{InputIds: prompt(uint32(1+i*n)%100000, n),
					SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}, Stream: true}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if r, err := f.readGenerate(ctx, reqs[i%pool]); err != nil || r.complete == nil {
					b.Fatalf("Generate: %v", err)
				}
			}
		})
	}
}

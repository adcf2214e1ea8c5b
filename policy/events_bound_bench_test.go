package policy_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// BenchmarkHostileEngineMirror measures what a hostile engine makes the
// router keep: blocks of 16 tokens, each under a parent hash never stored,
// spread over 8 data-parallel ranks of one worker that is not a rank target
// (the engine's account of the issue: 6M blocks over 8 ranks kept 2.22 GB).
// It reports the live heap the policy holds afterwards (heap-MB) and per
// block sent (B/block). Run with -benchtime=1x: one flood is the figure.
//
//	go test -run XXX -bench HostileEngineMirror -benchtime 1x ./policy/
func BenchmarkHostileEngineMirror(b *testing.B) {
	for _, blocks := range []int{1 << 20, 6 << 20} {
		b.Run(fmt.Sprintf("blocks=%d", blocks), func(b *testing.B) {
			for range b.N {
				heap, kept := hostileFlood(b, blocks, 8)
				b.ReportMetric(float64(heap)/(1<<20), "heap-MB")
				b.ReportMetric(float64(heap)/float64(blocks), "B/block")
				runtime.KeepAlive(kept)
			}
		})
	}
}

// hostileFlood sends blocks orphan blocks over ranks ranks to a fresh
// cache_aware policy and returns the heap it holds afterwards, and the
// policy (kept alive by the caller while it measures).
func hostileFlood(b *testing.B, blocks, ranks int) (heap uint64, kept *policy.CacheAware) {
	const chunk = 4096
	p, err := policy.NewCacheAware(policy.DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	url := "grpc://10.0.0.9:30000"
	p.SetKVEventMode(url, true)
	tokens := make([]uint32, 16)
	before := testutil.LiveHeap()
	seq := make([]uint64, ranks)
	evs := make([]workers.KVEvent, chunk)
	hash := int64(1)
	for sent := 0; sent < blocks; {
		rank := (sent / chunk) % ranks
		n := min(chunk, blocks-sent)
		for i := range n {
			evs[i] = workers.KVEvent{Kind: workers.KVStored, Parent: -hash, HasParent: true,
				Blocks: []workers.KVBlock{{Hash: hash, Tokens: tokens}}}
			hash++
		}
		p.ApplyKVEvents(url, &workers.KVEventBatch{Seq: seq[rank], DPRank: rank, Events: evs[:n]})
		seq[rank]++
		sent += n
	}
	clear(evs)
	after := testutil.LiveHeap()
	if after < before {
		return 0, p
	}
	return uint64(after - before), p
}

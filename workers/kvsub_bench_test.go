package workers_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/workers"
)

// BenchmarkKVSubscriptionBatch measures the subscription's own work per
// batch, from Recv returning a decoded batch to the handler's call and
// back: the sequence checks, the status, the cache group filter and
// whatever is kept of the batch applied. Decoding (BenchmarkKVEventDecodeSim)
// and the handler (policy's BenchmarkKVEventsPerRequest) are left out: the
// stream hands back one batch, renumbered, and the handler does nothing.
// The batch is a 1K-token request's as a full workers/sim engine sends it:
// 64 removals and 64 stores of one 16-token page each; ns/op is per
// batch, the subscription's start amortized over b.N.
func BenchmarkKVSubscriptionBatch(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	batch := &workers.KVEventBatch{Timestamp: time.Unix(1_700_000_000, 0)}
	for range 64 {
		batch.Events = append(batch.Events, workers.KVEvent{Kind: workers.KVRemoved, Hashes: []int64{rng.Int64()}})
		toks := make([]uint32, 16)
		for k := range toks {
			toks[k] = uint32(rng.IntN(128256))
		}
		batch.Events = append(batch.Events, workers.KVEvent{Kind: workers.KVStored, Parent: rng.Int64(), HasParent: true,
			Blocks: []workers.KVBlock{{Hash: rng.Int64(), Tokens: toks, BlockSize: 16}}})
	}
	e := &kvBenchEngine{batch: batch, n: uint64(b.N), done: make(chan struct{})}
	reg := workers.NewRegistry()
	if err := reg.Add(workers.NewWorker("grpc://10.0.0.1:30000", workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, e, nil)); err != nil {
		b.Fatal(err)
	}
	subs, err := workers.NewKVSubscriptions(workers.DefaultKVSubscriptionConfig(kvNoHandler{}))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	wg.Go(func() { _ = subs.Run(ctx, reg) })
	<-e.done
	b.StopTimer()
	cancel()
}

// kvBenchEngine's stream returns batch n times, numbered from 0, then
// closes done and waits for its context.
type kvBenchEngine struct {
	workers.Backend
	batch *workers.KVEventBatch
	n     uint64
	done  chan struct{}
}

func (e *kvBenchEngine) SubscribeKVEvents(ctx context.Context, _ uint64) (workers.KVEventStream, error) {
	return &kvBenchStream{e: e, ctx: ctx}, nil
}

type kvBenchStream struct {
	e    *kvBenchEngine
	ctx  context.Context
	sent uint64
}

func (s *kvBenchStream) Recv() (*workers.KVEventBatch, error) {
	if s.sent < s.e.n {
		s.e.batch.Seq = s.sent
		s.sent++
		return s.e.batch, nil
	}
	close(s.e.done)
	<-s.ctx.Done()
	return nil, status.FromContextError(s.ctx.Err()).Err()
}

type kvNoHandler struct{}

func (kvNoHandler) ApplyKVEvents(string, *workers.KVEventBatch) {}
func (kvNoHandler) ResetKVEvents(string, int)                   {}
func (kvNoHandler) SetKVEventMode(string, bool)                 {}

package policy_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// lruEngine produces the KV events of a full engine serving fresh prompts,
// as workers/sim's page cache emits them: each request's pages are stored
// one event per page, chained by parent hash, and, once the cache is full,
// each store is preceded by the removal of the least recently used leaf
// (pageCache.extend evicts one leaf, logged, before it logs the page it
// makes room for). Every prompt is fresh and shares nothing, so the leaves
// evicted are the oldest prompt's pages, last page first: removal events of
// one hash each, interleaved with the new prompt's stored events, all in the
// one batch the engine publishes when it admits the request.
type lruEngine struct {
	pageSize, capacity int
	next               int64
	chains             [][]int64 // live prompts' hashes, oldest first
	pages              int
	seq                uint64
}

// request returns the batch the engine publishes when it admits prompt.
func (e *lruEngine) request(prompt []uint32) *workers.KVEventBatch {
	b := &workers.KVEventBatch{Seq: e.seq}
	e.seq++
	var chain []int64
	for i := 0; i+e.pageSize <= len(prompt); i += e.pageSize {
		if e.pages >= e.capacity {
			old := e.chains[0]
			b.Events = append(b.Events, removed(old[len(old)-1]))
			e.pages--
			if old = old[:len(old)-1]; len(old) == 0 {
				e.chains = e.chains[1:]
			} else {
				e.chains[0] = old
			}
		}
		e.next++
		ev := workers.KVEvent{Kind: workers.KVStored, Blocks: []workers.KVBlock{{Hash: e.next, Tokens: prompt[i : i+e.pageSize]}}}
		if len(chain) > 0 {
			ev.Parent, ev.HasParent = chain[len(chain)-1], true
		}
		b.Events = append(b.Events, ev)
		chain = append(chain, e.next)
		e.pages++
	}
	e.chains = append(e.chains, chain)
	return b
}

// BenchmarkKVEventsPerRequest measures what one fresh request's KV events
// cost the router once its engine is full (issue 14's "cost per request"):
// cache_aware selects the prompt (a speculative insert, as the router does
// before the engine runs it), then the engine's batch for it is applied: the
// prompt's pages stored one event per page, each after the removal of one
// page of the oldest prompt. Only the batch is timed; ns/op, cpu-ns/op (the
// thread's CPU time) and allocs/op are per request's worth of events, and
// lookups/event counts the mirror's block-table lookups.
// The engine holds 32 prompts, or (kv=400000) as many tokens as a simulated
// engine (workers/sim) holds by default, whose mirror no longer fits in the
// processor's nearer caches. With cold, the caches are swept between
// batches (a write over twice the processor's 4 MiB L2 here, untimed), as
// a router's other work sweeps them between one engine's batches.
func BenchmarkKVEventsPerRequest(b *testing.B) {
	for _, c := range []struct {
		tokens, kv int
		cold       bool
	}{{1024, 0, false}, {8192, 0, false}, {1024, 400_000, false}, {8192, 400_000, false}, {1024, 400_000, true}, {8192, 400_000, true}} {
		tokens := c.tokens
		name := fmt.Sprintf("prompt=%d", tokens)
		if c.kv > 0 {
			name += fmt.Sprintf(",kv=%d", c.kv)
		}
		if c.cold {
			name += ",cold"
		}
		b.Run(name, func(b *testing.B) {
			const page = 16
			ws := fleet(1)
			w := ws[0]
			p := mustCA(b)
			p.SetKVEventMode(w.URL(), true)
			// 32 prompts fill the engine; the tree's default budget
			// holds far more.
			eng := &lruEngine{pageSize: page, capacity: 32 * tokens / page}
			if c.kv > 0 {
				eng.capacity = c.kv / page
			}
			rng := rand.New(rand.NewPCG(1, uint64(tokens)))
			prompt := func() []uint32 {
				ids := make([]uint32, tokens)
				for i := range ids {
					ids[i] = rng.Uint32N(150_000)
				}
				return ids
			}
			serve := func(ids []uint32) *workers.KVEventBatch {
				if _, err := p.Select(context.Background(), &policy.Request{InputIDs: ids}, workers.Views(ws)); err != nil {
					b.Fatal(err)
				}
				return eng.request(ids)
			}
			for range eng.capacity*page/tokens + 16 { // fill the engine, then some
				p.ApplyKVEvents(w.URL(), serve(prompt()))
			}
			// The batch is also timed on the thread's CPU clock: on a
			// shared machine the wall clock counts other processes too.
			var sweep []uint64
			if c.cold {
				sweep = make([]uint64, 1<<20) // 8 MiB: twice the L2
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			events := 0
			lookups := policy.MirrorLookups(p, w.URL())
			var cpu time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				bt := serve(prompt())
				events += len(bt.Events)
				if c.cold {
					sweepCaches(sweep)
				}
				b.StartTimer()
				c0, _ := threadCPU()
				p.ApplyKVEvents(w.URL(), bt)
				c1, _ := threadCPU()
				b.StopTimer()
				cpu += c1 - c0
				b.StartTimer()
			}
			b.ReportMetric(float64(events)/float64(b.N), "events/op")
			b.ReportMetric(float64(policy.MirrorLookups(p, w.URL())-lookups)/float64(events), "lookups/event")
			if cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
			if st := p.EventStats(); st.Overflows != 0 {
				b.Fatalf("mirror overflowed: %+v", st)
			}
		})
	}
}

// sweepCaches evicts what the processor's nearer caches hold by writing
// over buf, larger than them.
func sweepCaches(buf []uint64) {
	for i := range buf {
		buf[i]++
	}
}

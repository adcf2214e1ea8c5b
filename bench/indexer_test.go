package bench

import (
	"bufio"
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/tree"
	"github.com/kvgate/kvgate/workers"
)

// The indexer benchmark replays a Mooncake trace through kvgate's KV event
// mirror as Dynamo measured its indexer: every request is routed among 128
// workers by cache_aware (the lookup: the routing-time prefix match over the
// tree the mirror feeds), and the chosen worker's engine publishes the KV
// events of serving it (one stored event per new page, one removed event per
// page it evicts to make room), which the policy applies at once.
const (
	indexerWorkers = 128
	// indexerEngineTokens is each engine's KV capacity: 256K tokens, an 8B
	// model's cache on one GPU. 128 of them hold a third of the
	// conversation trace's distinct prompt tokens, so engines evict and the
	// mirror applies removals as well as stores.
	indexerEngineTokens = 256 << 10
)

// BenchmarkMooncakeIndexer reports, per replay of a trace:
//   - ops/s: block operations (a page stored or removed) the mirror applies
//     per second of the applying thread's CPU time, i.e. per core;
//   - lookup-p50-ns, lookup-p99-ns: wall time of the prefix match of a
//     prompt against the index of the 128 workers (CacheAware.Lookup: each
//     worker's matched tokens, read only), as Dynamo times its indexer's
//     find_matches;
//   - select-p50-ns, select-p99-ns: wall time of the whole Select among the
//     128 workers (the match, the decision and the speculative insert of
//     the chosen worker's path), as a request pays it;
//   - exact: the share of requests whose predicted cached tokens equal what
//     the chosen engine had cached, so a mirror that got faster by being
//     wrong shows it;
//   - hit: the share of prompt tokens the engines found cached.
//
// block=512 makes each of the trace's hash ids one KV block, as the trace
// (and Dynamo's benchmark of it) counts blocks; block=16 is kvgate's default
// page, where a prompt is 32 times as many blocks.
//
//	go test -run '^$' -bench MooncakeIndexer -benchtime 1x ./bench/
func BenchmarkMooncakeIndexer(b *testing.B) {
	for _, c := range []struct {
		trace    string
		page     int
		requests int // 0: all
		// unreported: the engines report no KV capacity (TensorRT-LLM
		// reports none), so the policy learns it from their evictions.
		unreported bool
	}{
		{"conversation", 512, 0, false},
		{"synthetic", 512, 0, false},
		{"conversation", 16, 2000, false},
		{"conversation", 512, 0, true},
	} {
		name := fmt.Sprintf("trace=%s/block=%d", c.trace, c.page)
		if c.requests > 0 {
			name += fmt.Sprintf("/requests=%d", c.requests)
		}
		if c.unreported {
			name += "/capacity=unreported"
		}
		b.Run(name, func(b *testing.B) {
			recs := readTraceRecords(b, filepath.Join("testdata", "traces", c.trace+"_trace.jsonl"), c.requests)
			var total indexerReplay
			for b.Loop() {
				var script *replayScript
				if total.requests == 0 && !c.unreported {
					script = newReplayScript(b, c.trace, c.page)
				}
				r, _ := replayIndexer(b, recs, c.page, !c.unreported, script)
				script.close(b)
				total.add(r)
			}
			total.report(b)
		})
	}
}

// readTraceRecords reads the first limit records (0: all) of a Mooncake
// trace.
func readTraceRecords(tb testing.TB, path string, limit int) []traceRecord {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var recs []traceRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() && (limit == 0 || len(recs) < limit) {
		var r traceRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			tb.Fatal(err)
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return recs
}

// tracePrompt is record r's prompt as ReadTrace builds it: each hash id 512
// tokens seeded by the id, cut to input_length (whole pages are what
// engines cache, so the tail beyond the hash ids is left out).
func tracePrompt(r traceRecord) []uint32 {
	p := make([]uint32, 0, len(r.HashIDs)*DefaultTraceBlockTokens)
	for _, id := range r.HashIDs {
		p = append(p, tokens(rng(0x7ace, id), DefaultTraceBlockTokens)...)
	}
	return p[:min(len(p), r.InputLength)]
}

// indexerReplay is what replays measured.
type indexerReplay struct {
	requests, exact      int
	promptTokens, cached int
	ops                  int
	applyCPU, applyWall  time.Duration
	lookups, selects     []time.Duration
	// lookupCPU is each lookup's CPU time on its thread: a tail in wall
	// time that is not in CPU time is the thread waiting for a core.
	lookupCPU []time.Duration
	// lookupPerK is each lookup's wall time per 1,000 prompt tokens: a
	// tail in lookups that is not in this is the longest prompts' work.
	lookupPerK []time.Duration
}

func (a *indexerReplay) add(r indexerReplay) {
	a.requests += r.requests
	a.exact += r.exact
	a.promptTokens += r.promptTokens
	a.cached += r.cached
	a.ops += r.ops
	a.applyCPU += r.applyCPU
	a.applyWall += r.applyWall
	a.lookups = append(a.lookups, r.lookups...)
	a.selects = append(a.selects, r.selects...)
	a.lookupCPU = append(a.lookupCPU, r.lookupCPU...)
	a.lookupPerK = append(a.lookupPerK, r.lookupPerK...)
}

func (a *indexerReplay) report(b *testing.B) {
	if a.requests == 0 {
		return
	}
	for name, ds := range map[string][]time.Duration{"lookup": a.lookups, "select": a.selects,
		"lookup-cpu": a.lookupCPU, "lookup-per-ktok": a.lookupPerK} {
		slices.Sort(ds)
		q := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))].Nanoseconds()) }
		b.ReportMetric(q(0.50), name+"-p50-ns")
		b.ReportMetric(q(0.99), name+"-p99-ns")
	}
	if a.applyCPU > 0 {
		b.ReportMetric(float64(a.ops)/a.applyCPU.Seconds(), "ops/s")
	}
	b.ReportMetric(float64(a.ops)/a.applyWall.Seconds(), "ops/s-wall")
	b.ReportMetric(float64(a.ops)/float64(a.requests), "ops/request")
	b.ReportMetric(float64(a.exact)/float64(a.requests), "exact")
	b.ReportMetric(float64(a.cached)/float64(a.promptTokens), "hit")
}

// replayIndexer routes recs among indexerWorkers with cache_aware, feeding
// the policy the events of each chosen engine, which report their KV
// capacity if reported is set. It returns what it measured and the
// policy, whose mirror holds what the engines hold at the end. A non-nil
// script records the replay for another indexer to follow.
func replayIndexer(b *testing.B, recs []traceRecord, page int, reported bool, script *replayScript) (indexerReplay, *policy.CacheAware) {
	b.StopTimer()
	defer b.StartTimer()
	o := policy.DefaultOptions()
	o.CacheAware.BlockSize = page
	p, err := policy.NewCacheAware(o)
	if err != nil {
		b.Fatal(err)
	}
	ws := make([]*workers.Worker, indexerWorkers)
	engines := make(map[*workers.Worker]*pagedEngine, len(ws))
	index := make(map[*workers.Worker]int, len(ws))
	for i := range ws {
		ws[i] = workers.NewWorker(fmt.Sprintf("grpc://10.0.%d.%d:30000", i/250, i%250), workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, nil, nil)
		index[ws[i]] = i
		engines[ws[i]] = newPagedEngine(page, indexerEngineTokens/page)
		p.SetKVEventMode(ws[i].URL(), true)
		// Engines report their KV capacity with their load, and the
		// default (wait) mode prices what a prompt evicts from a full
		// cache by it. Before the policy learned it from evictions, an
		// engine that reported none looked as if it had room, so
		// conversations piled onto the few engines holding the trace's
		// common first block and evicted one another while the rest
		// stayed empty: the hit rate fell from 0.23 to 0.04 and the
		// lookups, matching less, looked four times cheaper than they
		// are. No request is running between admissions, so nothing is
		// used.
		if reported {
			ws[i].SetEngineLoad(workers.Load{MaxTotalTokens: indexerEngineTokens})
		}
	}
	views := workers.Views(ws)
	// Thread CPU time is read on this goroutine's thread only.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var r indexerReplay
	r.lookups = make([]time.Duration, 0, len(recs))
	r.selects = make([]time.Duration, 0, len(recs))
	ctx := context.Background()
	var buf []tree.TenantMatch // each lookup's result, reused as the router's queue reuses it
	for _, rec := range recs {
		prompt := tracePrompt(rec)
		b.StartTimer()
		l0, _ := testutil.ThreadCPU()
		t0 := time.Now()
		m := p.Lookup(buf, prompt)
		buf = m.Tenants
		t1 := time.Now()
		l1, _ := testutil.ThreadCPU()
		d, err := p.Select(ctx, &policy.Request{InputIDs: prompt}, views)
		t2 := time.Now()
		b.StopTimer()
		r.lookups = append(r.lookups, t1.Sub(t0))
		r.lookupCPU = append(r.lookupCPU, l1-l0)
		r.lookupPerK = append(r.lookupPerK, t1.Sub(t0)*1000/time.Duration(max(len(prompt), 1)))
		r.selects = append(r.selects, t2.Sub(t1))
		if err == nil && m.Of(d.Worker.URL()) != d.PredictedCachedTokens {
			b.Fatalf("Lookup says %s holds %d tokens, Select predicted %d", d.Worker.URL(), m.Of(d.Worker.URL()), d.PredictedCachedTokens)
		}
		if err != nil {
			b.Fatal(err)
		}
		cached, batch := engines[d.Worker].admit(prompt)
		script.request(index[d.Worker], cached/page, rec, prompt, page, batch)
		ops := 0
		for i := range batch.Events {
			ops += len(batch.Events[i].Blocks) + len(batch.Events[i].Hashes)
		}
		b.StartTimer()
		c0, _ := testutil.ThreadCPU()
		t3 := time.Now()
		p.ApplyKVEvents(d.Worker.URL(), batch)
		wall := time.Since(t3)
		c1, _ := testutil.ThreadCPU()
		b.StopTimer()
		r.applyCPU += c1 - c0
		r.applyWall += wall
		r.ops += ops
		r.requests++
		r.promptTokens += len(prompt)
		r.cached += cached
		if d.PredictedCachedTokens == cached {
			r.exact++
		}
	}
	if st := p.EventStats(); st.Overflows != 0 || st.Unusable != 0 {
		b.Fatalf("the mirror did not follow the engines: %+v", st)
	}
	return r, p
}

// pagedEngine is one engine's paged KV cache as the indexer benchmark
// replays it: pages named by a hash chained to their parent's (as SGLang
// and vLLM name blocks), evicted least recently used leaf first, each
// change published as those engines publish it (one stored event per new
// page, one removed event per page evicted to make room, interleaved, in
// one batch per admitted request).
type pagedEngine struct {
	page, capacity int
	pages          map[int64]*enginePage
	// lru orders the pages most recently used first; a page is always
	// placed before its children, so the back is a leaf.
	lru list.List
	seq uint64
}

type enginePage struct {
	hash, parent int64
	hasParent    bool
	kids         int
	el           *list.Element
}

func newPagedEngine(page, capacity int) *pagedEngine {
	return &pagedEngine{page: page, capacity: capacity, pages: map[int64]*enginePage{}}
}

// pageHash names a page as engines do: a hash of its parent's name and its
// tokens (FNV-1a).
func pageHash(parent int64, tokens []uint32) int64 {
	h := uint64(14695981039346656037) ^ uint64(parent)
	h *= 1099511628211
	for _, t := range tokens {
		h ^= uint64(t)
		h *= 1099511628211
	}
	return int64(h)
}

// admit serves prompt: it returns the tokens the cache held (whole pages
// from the start) and the batch of events its pages caused.
func (e *pagedEngine) admit(prompt []uint32) (cached int, batch *workers.KVEventBatch) {
	batch = &workers.KVEventBatch{Seq: e.seq}
	e.seq++
	n := len(prompt) / e.page
	var path []*enginePage
	var parent int64
	i := 0
	for ; i < n; i++ {
		pg := e.pages[pageHash(parent, prompt[i*e.page:(i+1)*e.page])]
		if pg == nil {
			break
		}
		path = append(path, pg)
		parent = pg.hash
	}
	cached = i * e.page
	for k := len(path) - 1; k >= 0; k-- { // the leaf first: parents stay ahead
		e.lru.MoveToFront(path[k].el)
	}
	var up *enginePage
	if len(path) > 0 {
		up = path[len(path)-1]
	}
	for ; i < n; i++ {
		if len(e.pages) >= e.capacity {
			victim := e.lru.Back().Value.(*enginePage)
			if victim == up {
				break // the prompt alone fills the cache
			}
			if victim.kids != 0 {
				panic(fmt.Sprintf("indexer bench: LRU back %d has %d children", victim.hash, victim.kids))
			}
			e.evict(victim)
			batch.Events = append(batch.Events, workers.KVEvent{Kind: workers.KVRemoved, Hashes: []int64{victim.hash}})
		}
		toks := prompt[i*e.page : (i+1)*e.page]
		pg := &enginePage{hash: pageHash(parent, toks), parent: parent, hasParent: up != nil}
		if up != nil {
			up.kids++
			pg.el = e.lru.InsertAfter(pg, up.el)
		} else {
			pg.el = e.lru.PushFront(pg)
		}
		e.pages[pg.hash] = pg
		batch.Events = append(batch.Events, workers.KVEvent{Kind: workers.KVStored, Parent: parent, HasParent: up != nil,
			Blocks: []workers.KVBlock{{Hash: pg.hash, Tokens: toks}}})
		up, parent = pg, pg.hash
	}
	return cached, batch
}

func (e *pagedEngine) evict(pg *enginePage) {
	e.lru.Remove(pg.el)
	delete(e.pages, pg.hash)
	if pg.hasParent {
		e.pages[pg.parent].kids--
	}
}

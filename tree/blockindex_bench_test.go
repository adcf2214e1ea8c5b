package tree_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/kvgate/kvgate/tree"
)

// The block index benchmarks use the vLLM tracker's defaults: 16-token
// blocks, 8 backends, 100,000 blocks each, and 8K-token prompts (512
// blocks), each one of 16 shared 1K-token system prompts followed by its
// own 7K tokens. Every backend serves every system prompt, so a lookup
// runs a binary search on each of them. BENCHMARKS.md has the commands and
// figures.

const (
	biBlock   = 16
	biPrompt  = 8192
	biSystem  = 1024
	biVocab   = 128000
	biMax     = 100_000
	biWorkers = 8
)

// biCorpus generates prompt i on demand (system prompt i/8 % 16, then a
// tail seeded by i), so filling an index costs no memory beyond the index.
type biCorpus struct{ system [][]uint32 }

func newBiCorpus() *biCorpus {
	rng := rand.New(rand.NewPCG(1, 1))
	c := &biCorpus{system: make([][]uint32, 16)}
	for i := range c.system {
		c.system[i] = biTokens(rng, biSystem)
	}
	return c
}

func (c *biCorpus) prompt(i int) []uint32 {
	p := make([]uint32, 0, biPrompt)
	p = append(p, c.system[i/biWorkers%len(c.system)]...)
	return append(p, biTokens(rand.New(rand.NewPCG(uint64(i), 2)), biPrompt-biSystem)...)
}

func biTokens(rng *rand.Rand, n int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = rng.Uint32N(biVocab)
	}
	return ids
}

func biNames(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("grpc://worker-%d:30000", i)
	}
	return s
}

// biFull returns an index holding what 8 backends hold at their budget:
// prompts 0..n-1, prompt i on backend i%8, n = 8 × 100,000 / 512 (1,560).
func biFull(b *testing.B, hash string, shards int) (*tree.BlockIndex, *biCorpus, int) {
	b.Helper()
	x := mustBlockIndex(b, tree.BlockIndexConfig{BlockSize: biBlock, MaxBlocksPerBackend: biMax, Hash: hash, Shards: shards})
	c := newBiCorpus()
	names := biNames(biWorkers)
	n := biWorkers * biMax / (biPrompt / biBlock)
	for i := range n {
		x.Record(x.Keys(c.prompt(i)), names[i%biWorkers])
	}
	return x, c, n
}

// BenchmarkBlockIndexMatch8K is one selection's lookup: the keys of an 8K
// prompt (512 blocks) and their match against 8 backends, in an index at
// its default budget. The prompt is a known one, so one backend matches all
// 512 blocks and the 7 others its 64-block system prompt: every backend
// runs its binary search. Sub-benchmarks time the keys and the
// match alone.
func BenchmarkBlockIndexMatch8K(b *testing.B) {
	for _, hash := range []string{tree.HashChained, tree.HashPosition} {
		x, c, n := biFull(b, hash, 0)
		names := biNames(biWorkers)
		prompts := make([][]uint32, 64)
		keys := make([][]uint64, len(prompts))
		for i := range prompts {
			prompts[i] = c.prompt(i * 7 % n)
			keys[i] = x.Keys(prompts[i])
		}
		b.Run(hash+"/keys+match", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				x.Match(x.Keys(prompts[i%len(prompts)]), names)
				i++
			}
		})
		b.Run(hash+"/match", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				x.Match(keys[i%len(keys)], names)
				i++
			}
		})
		b.Run(hash+"/keys", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				x.Keys(prompts[i%len(prompts)])
				i++
			}
		})
	}
}

// BenchmarkBlockIndexMatchParallel is the locking decision: the same match
// from every core at once, on one RWMutex (shards=1) and on 64 shards.
func BenchmarkBlockIndexMatchParallel(b *testing.B) {
	for _, shards := range []int{1, 64} {
		x, c, n := biFull(b, tree.HashChained, shards)
		names := biNames(biWorkers)
		keys := make([][]uint64, 64)
		for i := range keys {
			keys[i] = x.Keys(c.prompt(i * 7 % n))
		}
		b.Run(fmt.Sprintf("shards=%d/match", shards), func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					x.Match(keys[i%len(keys)], names)
					i++
				}
			})
		})
		// Routing while records run: every eighth operation records a
		// known prompt again (the policy records each decision).
		b.Run(fmt.Sprintf("shards=%d/match+record", shards), func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					k := keys[i%len(keys)]
					if i%8 == 0 {
						x.Record(k, names[i%biWorkers])
					} else {
						x.Match(k, names)
					}
					i++
				}
			})
		})
	}
}

// BenchmarkBlockIndexRecord8K records an 8K prompt (512 blocks): new
// prompts into an index at its budget, so every eighth of a budget a Record
// starts an eviction (its CPU time lands in the figure, whichever core runs
// it), as under a stream of unique prompts; the same without a budget; and
// a known prompt again, which only refreshes epochs.
func BenchmarkBlockIndexRecord8K(b *testing.B) {
	for _, hash := range []string{tree.HashChained, tree.HashPosition} {
		x, c, n := biFull(b, hash, 0)
		names := biNames(biWorkers)
		b.Run(hash+"/new", func(b *testing.B) {
			b.ReportAllocs()
			i := n
			for b.Loop() {
				b.StopTimer()
				keys := x.Keys(c.prompt(i))
				b.StartTimer()
				x.Record(keys, names[i%biWorkers])
				i++
			}
		})
		b.Run(hash+"/new-unbounded", func(b *testing.B) {
			// The same inserts into an index without a budget: the
			// difference with "new" is the evictions' share.
			u := mustBlockIndex(b, tree.BlockIndexConfig{BlockSize: biBlock, MaxBlocksPerBackend: 1 << 30, Hash: hash})
			for i := range n {
				u.Record(u.Keys(c.prompt(i)), names[i%biWorkers])
			}
			b.ReportAllocs()
			i := n
			for b.Loop() {
				b.StopTimer()
				keys := u.Keys(c.prompt(i))
				b.StartTimer()
				u.Record(keys, names[i%biWorkers])
				i++
			}
		})
		b.Run(hash+"/known", func(b *testing.B) {
			keys := x.Keys(c.prompt(0))
			b.ReportAllocs()
			for b.Loop() {
				x.Record(keys, names[0])
			}
		})
	}
}

// BenchmarkBlockIndexEvict times one Evict of a full index after a
// sixteenth of each backend's budget was added (below the background
// trigger), while another goroutine keeps matching 8K prompts: it reports
// the longest match seen during evictions (routing waits on a shard's
// lock), and, for scale, the longest seen by the same probe beside a
// goroutine that only burns CPU as long (on a shared machine, descheduling
// alone reaches milliseconds). Shards 64 (the default), 256 and 1024.
func BenchmarkBlockIndexEvict(b *testing.B) {
	for _, shards := range []int{64, 256, 1024} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) { benchEvict(b, shards) })
	}
}

func benchEvict(b *testing.B, shards int) {
	x, c, n := biFull(b, tree.HashChained, shards)
	names := biNames(biWorkers)
	keys := x.Keys(c.prompt(0))
	// probe matches until stop is closed and returns its longest match.
	probe := func(stop <-chan struct{}) <-chan time.Duration {
		out := make(chan time.Duration, 1)
		go func() {
			var worst time.Duration
			for {
				select {
				case <-stop:
					out <- worst
					return
				default:
				}
				start := time.Now()
				x.Match(keys, names)
				worst = max(worst, time.Since(start))
			}
		}()
		return out
	}
	next := n
	var during, idle time.Duration // idle: beside CPU work, not an eviction
	for b.Loop() {
		b.StopTimer()
		for range biWorkers * biMax / 16 / (biPrompt / biBlock) {
			x.Record(x.Keys(c.prompt(next)), names[next%biWorkers])
			next++
		}
		stop := make(chan struct{})
		worst := probe(stop)
		start := time.Now()
		b.StartTimer()
		x.Evict()
		b.StopTimer()
		took := time.Since(start)
		close(stop)
		during = max(during, <-worst)

		// The baseline: the same probe beside a goroutine that only
		// burns CPU for as long, so both compete for the cores alike.
		stop = make(chan struct{})
		worst = probe(stop)
		spin := 0
		for until := time.Now().Add(took); time.Now().Before(until); {
			spin += len(x.Keys(c.prompt(spin)))
		}
		close(stop)
		idle = max(idle, <-worst)
		b.StartTimer()
	}
	b.ReportMetric(float64(during.Microseconds()), "longest-match-µs")
	b.ReportMetric(float64(idle.Microseconds()), "longest-busy-match-µs")
}

// BenchmarkBlockIndexBytes is the index's memory per token held: the heap
// growth (after GC) from recording distinct 8K prompts up to the default
// budget of 8 backends, over the tokens held (entries × block size), and
// Stats' estimate of the same.
func BenchmarkBlockIndexBytes(b *testing.B) {
	for _, hash := range []string{tree.HashChained, tree.HashPosition} {
		b.Run(hash, func(b *testing.B) {
			var heap, est, tokens float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				x, _, _ := biFull(b, hash, 0)
				runtime.GC()
				runtime.ReadMemStats(&after)
				st := x.Stats()
				tokens = float64(st.Entries * biBlock)
				heap = float64(after.HeapAlloc-before.HeapAlloc) / tokens
				est = float64(st.Bytes) / tokens
				runtime.KeepAlive(x)
			}
			b.ReportMetric(heap, "heap-B/token")
			b.ReportMetric(est, "stats-B/token")
			b.ReportMetric(tokens, "tokens")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// fmWorkload is a named prompt sequence for the false-match measurement.
type fmWorkload struct {
	name    string
	prompts [][]uint32
}

// fmWorkloads are the measurement's workloads, in bench.Generate's shapes
// and sizes (its defaults), plus two where equal blocks recur at equal
// positions after different text, which is what position keys confuse:
//
//   - shared-prefix: 64 groups × 16 prompts, a 2,048-token system prompt per
//     group and a 128-token question, interleaved.
//   - multiturn: 64 users × 8 rounds after one 1,000-token system prompt;
//     each round adds a 128-token question to the previous prompt and its
//     100-token answer; the users take turns.
//   - rag: a 512-token system prompt, 4 retrieved chunks of 256 tokens (a
//     fixed chunk size, as retrieval pipelines cut documents) drawn from 200
//     with Zipf popularity, and a 64-token question; 2,048 prompts.
//   - user-header: a 512-token system prompt, a 32-token header naming one
//     of 500 users (name, plan, date: the same length for all), 1,536 tokens
//     of instructions and tools the same for all, and a 128-token question;
//     2,048 prompts.
func fmWorkloads() []fmWorkload {
	rng := rand.New(rand.NewPCG(42, 42))
	tok := func(n int) []uint32 { return biTokens(rng, n) }
	cat := func(parts ...[]uint32) []uint32 {
		var p []uint32
		for _, part := range parts {
			p = append(p, part...)
		}
		return p
	}
	var ws []fmWorkload

	var sp [][]uint32
	for range 64 {
		sys := tok(2048)
		for range 16 {
			sp = append(sp, cat(sys, tok(128)))
		}
	}
	rng.Shuffle(len(sp), func(i, j int) { sp[i], sp[j] = sp[j], sp[i] })
	ws = append(ws, fmWorkload{"shared-prefix", sp})

	var mt [][]uint32
	sys := tok(1000)
	convs := make([][]uint32, 64)
	for u := range convs {
		convs[u] = sys
	}
	for r := range 8 {
		for u := range convs {
			if r > 0 {
				convs[u] = cat(convs[u], tok(100)) // the previous answer
			}
			convs[u] = cat(convs[u], tok(128))
			mt = append(mt, convs[u])
		}
	}
	ws = append(ws, fmWorkload{"multiturn", mt})

	chunks := make([][]uint32, 200)
	for i := range chunks {
		chunks[i] = tok(256)
	}
	zipf := rand.NewZipf(rng, 1.1, 1, uint64(len(chunks)-1))
	sys = tok(512)
	var rag [][]uint32
	for range 2048 {
		p := cat(sys)
		for range 4 {
			p = cat(p, chunks[zipf.Uint64()])
		}
		rag = append(rag, cat(p, tok(64)))
	}
	ws = append(ws, fmWorkload{"rag", rag})

	headers := make([][]uint32, 500)
	for i := range headers {
		headers[i] = tok(32)
	}
	sys, tools := tok(512), tok(1536)
	var uh [][]uint32
	for range 2048 {
		uh = append(uh, cat(sys, headers[rng.IntN(len(headers))], tools, tok(128)))
	}
	ws = append(ws, fmWorkload{"user-header", uh})
	return ws
}

// fmResult counts one workload's false matches.
type fmResult struct {
	requests int
	// chosenFalse counts requests whose chosen backend's predicted match
	// exceeded what it really held; anyFalse, requests where some
	// backend's did; anyOverVerified, requests where some backend's
	// binary-search match exceeded its block-by-block VerifiedMatch.
	chosenFalse, anyFalse, anyOverVerified int
	// predicted and overpredicted sum the chosen backends' predicted
	// tokens and the part of them they did not hold.
	predicted, overpredicted int
	// hits counts requests routed by cache (match over 30% of the blocks).
	hits int
	// held sums the tokens the chosen backends really held of their
	// prompts, of tokens the prompts' whole blocks: the cache reuse the
	// routing achieved.
	held, tokens int
}

// fmSimulate routes prompts over 8 backends as vllm_cache_aware does without
// load (the best match when it covers more than 30% of the prompt's blocks,
// else the backend that received the fewest requests) and records each for
// its backend. The truth is a second, chained index that records the same
// decisions with no budget: what each backend was really sent. Budgets are
// the defaults, which these workloads stay within, so nothing is evicted.
func fmSimulate(b *testing.B, hash string, prompts [][]uint32) fmResult {
	x := mustBlockIndex(b, tree.BlockIndexConfig{BlockSize: biBlock, MaxBlocksPerBackend: biMax, Hash: hash})
	truth := mustBlockIndex(b, tree.BlockIndexConfig{BlockSize: biBlock, MaxBlocksPerBackend: 1 << 30, Hash: tree.HashChained})
	names := biNames(biWorkers)
	sent := make([]int, biWorkers)
	var r fmResult
	for _, p := range prompts {
		keys, tkeys := x.Keys(p), truth.Keys(p)
		if len(keys) == 0 {
			continue
		}
		r.requests++
		m := x.Match(keys, names)
		held := make([]int, biWorkers)
		anyFalse, anyOver := false, false
		for i, n := range names {
			held[i] = truth.VerifiedMatch(tkeys, n)
			anyFalse = anyFalse || m[i] > held[i]
			anyOver = anyOver || m[i] > x.VerifiedMatch(keys, n)
		}
		best, least := 0, 0
		for i := range names {
			if m[i] > m[best] || m[i] == m[best] && sent[i] < sent[best] {
				best = i
			}
			if sent[i] < sent[least] {
				least = i
			}
		}
		chosen := least
		if float64(m[best])/float64(len(keys)) > 0.3 {
			chosen = best
			r.hits++
		}
		if m[chosen] > held[chosen] {
			r.chosenFalse++
			r.overpredicted += (m[chosen] - held[chosen]) * biBlock
		}
		r.predicted += m[chosen] * biBlock
		r.held += held[chosen] * biBlock
		r.tokens += len(keys) * biBlock
		if anyFalse {
			r.anyFalse++
		}
		if anyOver {
			r.anyOverVerified++
		}
		sent[chosen]++
		x.Record(keys, names[chosen])
		truth.Record(tkeys, names[chosen])
	}
	return r
}

// BenchmarkBlockIndexFalseMatches measures how often each key variant's
// binary search predicts more cached blocks than a backend holds, on the
// workloads of fmWorkloads. The figures are counts, not times; run it once:
//
//	go test -run '^$' -bench BlockIndexFalseMatches -benchtime 1x ./tree
func BenchmarkBlockIndexFalseMatches(b *testing.B) {
	for _, wl := range fmWorkloads() {
		for _, hash := range []string{tree.HashChained, tree.HashPosition} {
			b.Run(wl.name+"/"+hash, func(b *testing.B) {
				var r fmResult
				for b.Loop() {
					r = fmSimulate(b, hash, wl.prompts)
				}
				pct := func(n, of int) float64 { return 100 * float64(n) / float64(max(of, 1)) }
				b.ReportMetric(pct(r.chosenFalse, r.requests), "chosen-false-%")
				b.ReportMetric(pct(r.anyFalse, r.requests), "any-false-%")
				b.ReportMetric(pct(r.anyOverVerified, r.requests), "over-verified-%")
				b.ReportMetric(pct(r.overpredicted, r.predicted), "overpredicted-tokens-%")
				b.ReportMetric(pct(r.hits, r.requests), "hit-%")
				b.ReportMetric(pct(r.held, r.tokens), "reused-tokens-%")
				b.ReportMetric(float64(r.requests), "requests")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

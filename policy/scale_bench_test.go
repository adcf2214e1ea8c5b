package policy_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// The figure: selection cost with 1,000 and 4,000 routing targets
// (data-parallel ranks count as targets) must stay flat per request. These
// benchmarks measure it for every policy at 10 to 4,000 workers, with the
// per-operation p50 and p99 beside ns/op, so that a cost growing with the
// fleet shows up as a ratio between sizes measured in one run.
//
//	go test -run '^$' -bench 'SelectionByFleetSize|CandidateSnapshot' -benchmem ./policy/
//
// Each operation is timed on its own, on the wall clock (p50-ns, p99-ns)
// and, on Linux, on its thread's CPU clock (cpu-p50-ns, cpu-p99-ns): on a
// shared machine the wall clock's tail is mostly other processes. The clock
// reads are in every figure, ns/op included (random over 10 workers, nearly
// nothing but them, shows their cost): compare fleet sizes, not absolutes
// below a microsecond.

// scaleSizes are the fleet sizes measured: 4,000 is 1,000 engines with four
// data-parallel ranks each.
var scaleSizes = []int{10, 100, 1000, 4000}

// scaleWorkload is the traffic every policy sees: 2K-token prompts made of a
// chat-template header every prompt shares (every worker that served
// anything holds it, so the tree's first node has a holder per worker), one
// of 64 tenants' 992-token system prompts, and a user turn of 256 to 2,048
// tokens. Each prompt carries a session routing key for the keyed policies.
type scaleWorkload struct {
	reqs    []*policy.Request
	warmups [][]uint32 // one prompt per worker, inserted for it alone
}

const (
	scaleTenants = 64
	scalePool    = 512 // distinct requests, cycled: after one pass, cache hits
)

func newScaleWorkload(n int) scaleWorkload {
	r := rand.New(rand.NewPCG(1, uint64(n)))
	header := caTokens(1, 32)
	systems := make([][]uint32, scaleTenants)
	for i := range systems {
		systems[i] = caTokens(10+i, 992)
	}
	var w scaleWorkload
	for i := range scalePool {
		user := caTokens(1_000+i, 256+r.IntN(1793))
		w.reqs = append(w.reqs, &policy.Request{
			InputIDs:   caJoin(header, systems[i%scaleTenants], user),
			RoutingKey: fmt.Sprintf("session-%d", i),
		})
	}
	for i := range n {
		w.warmups = append(w.warmups, caJoin(header, systems[i%scaleTenants], caTokens(10_000+i, 1024)))
	}
	return w
}

// scaleFleet registers n workers with in-flight loads of 0 to 2 (balanced:
// no policy's imbalance rule fires) and returns the registry.
func scaleFleet(b *testing.B, n int) *workers.Registry {
	b.Helper()
	reg := workers.NewRegistry()
	for i, w := range fleet(n) {
		if err := reg.Add(w); err != nil {
			b.Fatal(err)
		}
		for range i % 3 {
			w.Acquire() // held for the benchmark's life
		}
	}
	return reg
}

// serverChecks is what the server does per request with the candidates
// before the policy sees them (pipeline/dispatch.go CheckCandidates,
// pipeline/validate.go vocabOf and lengthBounds): find one available
// worker, and the smallest vocabulary and context among the healthy ones.
func serverChecks(ws []*workers.Worker) (vocab, context int) {
	if !slices.ContainsFunc(ws, (*workers.Worker).Available) {
		return 0, 0
	}
	for _, w := range ws {
		if !w.Healthy() {
			continue
		}
		info := w.Info()
		if info.VocabSize > 0 && (vocab == 0 || info.VocabSize < vocab) {
			vocab = info.VocabSize
		}
		if info.MaxContextLength > 0 && (context == 0 || info.MaxContextLength < context) {
			context = info.MaxContextLength
		}
	}
	return vocab, context
}

// latencies records per-operation wall and CPU durations in rings (the
// last 1M operations) and reports their percentiles.
type latencies struct {
	wall, cpu []time.Duration
	n         int
	noCPU     bool
}

func newLatencies() *latencies {
	return &latencies{wall: make([]time.Duration, 1<<20), cpu: make([]time.Duration, 1<<20)}
}

// time runs op and records its durations.
func (l *latencies) time(op func()) {
	c0, ok0 := threadCPU()
	w0 := time.Now()
	op()
	w := time.Since(w0)
	c1, ok1 := threadCPU()
	i := l.n % len(l.wall)
	l.wall[i], l.cpu[i] = w, c1-c0
	l.noCPU = l.noCPU || !ok0 || !ok1
	l.n++
}

func (l *latencies) report(b *testing.B) {
	m := min(l.n, len(l.wall))
	if m == 0 {
		return
	}
	at := func(d []time.Duration, q float64) float64 {
		d = slices.Clone(d[:m])
		slices.Sort(d)
		return float64(d[min(len(d)-1, int(q*float64(len(d))))].Nanoseconds())
	}
	b.ReportMetric(at(l.wall, 0.50), "p50-ns")
	b.ReportMetric(at(l.wall, 0.99), "p99-ns")
	if !l.noCPU {
		b.ReportMetric(at(l.cpu, 0.50), "cpu-p50-ns")
		b.ReportMetric(at(l.cpu, 0.99), "cpu-p99-ns")
	}
}

// BenchmarkSelectionByFleetSize measures, per policy and fleet size:
//
//   - op=select: Select alone over the registry's current workers;
//   - op=request: what one request costs the router's routing path: the
//     registry's candidates of its role (Registry.WithRole), the server's
//     checks on them, Select, taking and releasing the worker's load slot,
//     and Observe for the policies that learn from outcomes (the engine
//     reporting exactly the predicted cached tokens).
//
// The cache-aware policies start with every worker holding one prompt of
// its tenant (so the tree has a tenant per worker) and one pass of the
// request pool already placed.
func BenchmarkSelectionByFleetSize(b *testing.B) {
	ctx := context.Background()
	for _, name := range policy.Names() {
		for _, n := range scaleSizes {
			w := newScaleWorkload(n)
			for _, op := range []string{"select", "request"} {
				b.Run(fmt.Sprintf("policy=%s/workers=%d/op=%s", name, n, op), func(b *testing.B) {
					reg := scaleFleet(b, n)
					p, err := policy.New(name, policy.DefaultOptions())
					if err != nil {
						b.Fatal(err)
					}
					all := reg.Current().Workers
					for i, ids := range w.warmups {
						if _, err := p.Select(ctx, &policy.Request{InputIDs: ids}, workers.Views(all[i:i+1])); err != nil {
							b.Fatal(err)
						}
					}
					obs, _ := p.(policy.Observer)
					request := func(req *policy.Request) {
						cands := reg.WithRole(workers.RoleRegular)
						serverChecks(cands)
						d, err := p.Select(ctx, req, workers.Views(cands))
						if err != nil {
							b.Fatal(err)
						}
						d.Worker.Acquire()()
						if obs != nil {
							obs.Observe(req, d, policy.Outcome{CachedTokens: d.PredictedCachedTokens})
						}
					}
					for _, req := range w.reqs {
						request(req)
					}
					lat := newLatencies()
					i := 0
					runtime.LockOSThread() // for the thread CPU clock
					defer runtime.UnlockOSThread()
					b.ReportAllocs()
					for b.Loop() {
						req := w.reqs[i%len(w.reqs)]
						i++
						lat.time(func() {
							if op == "request" {
								request(req)
							} else if _, err := p.Select(ctx, req, workers.Views(all)); err != nil {
								b.Fatal(err)
							}
						})
					}
					lat.report(b)
				})
			}
		}
	}
}

// BenchmarkCandidateSnapshot measures the per-request work before any
// policy runs: the registry's workers of the request's role and the
// server's checks on them.
func BenchmarkCandidateSnapshot(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			reg := scaleFleet(b, n)
			b.ReportAllocs()
			for b.Loop() {
				serverChecks(reg.WithRole(workers.RoleRegular))
			}
		})
	}
}

// BenchmarkObserveByFleetSize measures cache_aware's Observe of a completed
// request on a worker with KV events (the exact mode): the prompt and a
// 128-token reply are inserted speculatively, due to expire unless the
// engine's events confirm them. Every worker holds the workload's header, as
// in BenchmarkSelectionByFleetSize. The speculations are expired every 1,024
// operations outside the timing, so the queue stays bounded.
func BenchmarkObserveByFleetSize(b *testing.B) {
	ctx := context.Background()
	for _, n := range scaleSizes {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			w := newScaleWorkload(n)
			reg := scaleFleet(b, n)
			p, err := policy.NewCacheAware(policy.DefaultOptions())
			if err != nil {
				b.Fatal(err)
			}
			all := reg.Current().Workers
			for i, ids := range w.warmups {
				p.SetKVEventMode(all[i].URL(), true)
				if _, err := p.Select(ctx, &policy.Request{InputIDs: ids}, workers.Views(all[i:i+1])); err != nil {
					b.Fatal(err)
				}
			}
			type done struct {
				req *policy.Request
				d   policy.Decision
				out policy.Outcome
			}
			var ds []done
			for i, req := range w.reqs {
				d, err := p.Select(ctx, req, workers.Views(all))
				if err != nil {
					b.Fatal(err)
				}
				ds = append(ds, done{req, d, policy.Outcome{CachedTokens: d.PredictedCachedTokens, OutputIDs: caTokens(50_000+i, 128)}})
			}
			lat := newLatencies()
			i := 0
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			for b.Loop() {
				x := ds[i%len(ds)]
				i++
				lat.time(func() { p.Observe(x.req, x.d, x.out) })
				if i%1024 == 0 {
					b.StopTimer()
					policy.ExpireSpeculations(p, time.Now().Add(time.Hour))
					b.StartTimer()
				}
			}
			lat.report(b)
		})
	}
}

package policy_test

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvgate/kvgate/internal/testutil/policytest"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// waitWorker is one candidate's state in a wait-mode case: what its tree
// holds of the prompt, its load, and the speed the router has measured.
type waitWorker struct {
	holds    int             // leading prompt tokens the worker served before
	inFlight int             // requests this router has in flight there
	limit    int             // the engine's running-request limit (0: none reported)
	queue    int             // prompt tokens sent there whose first token has not come
	run      time.Duration   // how long the requests it served took
	runs     []time.Duration // instead of run: requests of unlike lengths
	rate     int             // tokens per second its timed prefills ran at (0: none timed)
	// together: the requests in flight all started just now (a wave, as
	// late binding fills a full engine's freed slots at once). Otherwise
	// they started one every run ÷ limit, the last just now: a steady
	// stream, whose oldest frees its slot run ÷ limit from now.
	together bool
	kv, held int // the engine's KV capacity and what its running requests hold (0: not reported)
	// steps: the decode step it was measured at (see stepLine), nil:
	// none measured.
	steps []decodeStep
	// empty: the worker has served nothing. Otherwise it served another
	// prompt first, so that the start-up rule, which moves a request to an
	// idle worker holding nothing, leaves the case to the terms.
	empty bool
}

// decodeStep is one request the router relayed, by the requests running
// beside and including it on its engine and its time per token.
type decodeStep struct {
	batch    int
	perToken time.Duration
}

// stepLine is requests that decoded at batches 1 to 8, each step base plus
// per for every request in it: the engine's step grows with its batch.
func stepLine(base, per time.Duration) []decodeStep {
	var out []decodeStep
	for b := 1; b <= 8; b++ {
		out = append(out, decodeStep{b, base + per*time.Duration(b)})
	}
	return out
}

// waitCases are the wait mode's rule, written as cases: a 4,096-token
// prompt, two workers A and B, and who wins with which reason. At 20,000
// tokens a second the whole prompt takes 200 ms to prefill, a quarter of
// it 50 ms.
var waitCases = []struct {
	name   string
	a, b   waitWorker
	fleet  float64 // --cache-aware-fleet-weight
	uneven float64 // --cache-aware-uneven-weight
	step   float64 // --cache-aware-step-weight
	// computes: the request asks for its prompt's log-probabilities, so
	// its engine computes the prompt whole (Request.ComputesPrompt).
	computes bool
	want     string // "A" or "B"
	reason   []string
	absent   []string // what the reason must not say
}{
	{name: "below the limit nothing waits for a slot: the match is prefill saved",
		a:     waitWorker{holds: 3072, inFlight: 7, limit: 8, run: 8 * time.Second, rate: 20000},
		b:     waitWorker{limit: 8, run: 8 * time.Second, rate: 20000},
		fleet: 4, want: "A", reason: []string{"expects 51ms = max(slot 0ms, lane 0ms (0 queued)) + own 51ms (4096 prompt − 3072 cached)"}},
	{name: "a full cached engine with a long expected wait loses to a cold idle one",
		a:     waitWorker{holds: 3072, inFlight: 8, limit: 8, run: 8 * time.Second, rate: 20000},
		b:     waitWorker{limit: 8, run: 8 * time.Second, rate: 20000},
		fleet: 4, want: "B", reason: []string{"expects 205ms = max(slot 0ms, lane 0ms (0 queued)) + own 205ms (4096 prompt − 0 cached)", "next grpc://a:1 1051ms"},
		absent: []string{"fleet"}},
	{name: "a full cached engine whose wait is shorter than the prefill saved wins",
		a:     waitWorker{holds: 3072, inFlight: 8, limit: 8, run: 800 * time.Millisecond, rate: 20000},
		b:     waitWorker{limit: 8, run: 800 * time.Millisecond, rate: 20000},
		fleet: 4, want: "A", reason: []string{"max(slot 100ms (1 ahead), lane 0ms (0 queued)) + own 51ms"}},
	{name: "the same, for a request whose engine computes its prompt whole: the match saves it nothing, and the idle engine wins",
		a:     waitWorker{holds: 3072, inFlight: 8, limit: 8, run: 800 * time.Millisecond, rate: 20000},
		b:     waitWorker{limit: 8, run: 800 * time.Millisecond, rate: 20000},
		fleet: 4, computes: true, want: "B", reason: []string{"expects 205ms = max(slot 0ms, lane 0ms (0 queued)) + own 205ms (4096 prompt − 0 cached)", "next grpc://a:1 305ms"}},
	{name: "a full cached engine whose requests all started just now frees a slot only when they end: the prompt goes to the idle engine",
		a:     waitWorker{holds: 3072, inFlight: 8, limit: 8, run: 800 * time.Millisecond, rate: 20000, together: true},
		b:     waitWorker{limit: 8, run: 800 * time.Millisecond, rate: 20000},
		fleet: 4, want: "B", reason: []string{"expects 205ms = max(slot 0ms, lane 0ms (0 queued)) + own 205ms", "next grpc://a:1 851ms"}},
	{name: "requests of unlike lengths end in any order: one frees a slot about every run ÷ limit, however they started",
		a:     waitWorker{holds: 3072, inFlight: 8, limit: 8, runs: []time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 2380 * time.Millisecond}, rate: 20000, together: true},
		b:     waitWorker{limit: 8, run: 800 * time.Millisecond, rate: 20000},
		fleet: 4, want: "A", reason: []string{"max(slot 100ms (1 ahead), lane 0ms (0 queued)) + own 51ms"}},
	{name: "lengths between alike and unlike: the two estimates weighed by their spread (cv 0.5: half of 800ms and half of 100ms)",
		a:     waitWorker{holds: 3072, inFlight: 8, limit: 8, runs: []time.Duration{400 * time.Millisecond, 1200 * time.Millisecond}, rate: 20000, together: true},
		b:     waitWorker{limit: 8, run: 800 * time.Millisecond, rate: 20000},
		fleet: 4, want: "B", reason: []string{"next grpc://a:1 501ms"}},
	{name: "a full cache whose running requests hold the shared prefix: the whole match counts, not only what fits beside them",
		a:     waitWorker{holds: 3072, limit: 8, run: 800 * time.Millisecond, rate: 20000, kv: 16384, held: 16384, empty: true},
		b:     waitWorker{limit: 8, run: 800 * time.Millisecond, rate: 20000, kv: 16384, held: 15360, empty: true},
		fleet: 4, want: "A", reason: []string{"own 256ms (4096 prompt − 3072 cached)", "next grpc://b:1 358ms"}},
	{name: "every engine full, no fleet charge: a long prefill queue on the cached engine sends the prompt away",
		a:     waitWorker{holds: 3072, inFlight: 8, limit: 8, queue: 20000, run: 4 * time.Second, rate: 20000},
		b:     waitWorker{inFlight: 8, limit: 8, run: 4 * time.Second, rate: 20000},
		fleet: 0, want: "B", reason: []string{"max(slot 500ms (1 ahead), lane 0ms (0 queued)) + own 205ms"}},
	{name: "every engine full: the fleet's charge for a copied prefix keeps the prompt on its cache",
		a:     waitWorker{holds: 3072, inFlight: 8, limit: 8, queue: 20000, run: 4 * time.Second, rate: 20000},
		b:     waitWorker{inFlight: 8, limit: 8, run: 4 * time.Second, rate: 20000},
		fleet: 4, want: "A", reason: []string{"lane 1000ms (20000 queued)) + own 51ms", "fleet 205ms (pressure 1.00 × 4: soonest start 500ms ≥ whole prefill 205ms", "next grpc://b:1 1524ms"}},
	{name: "one engine with a little queued prefill, the rest idle: no fleet charge, the fleet keeps up",
		a:     waitWorker{holds: 3072, limit: 8, queue: 2000, run: 4 * time.Second, rate: 20000},
		b:     waitWorker{limit: 8, run: 4 * time.Second, rate: 20000},
		fleet: 4, want: "A", reason: []string{"expects 151ms = max(slot 0ms, lane 100ms (2000 queued)) + own 51ms (4096 prompt − 3072 cached)", "next grpc://b:1 205ms"},
		absent: []string{"fleet"}},
	{name: "every engine's queue is long, none at its limit: the fleet is behind and pays for a copied prefix",
		a:     waitWorker{holds: 3072, limit: 8, queue: 30000, run: 4 * time.Second, rate: 20000},
		b:     waitWorker{limit: 8, queue: 20000, run: 4 * time.Second, rate: 20000},
		fleet: 4, want: "A", reason: []string{"lane 1500ms (30000 queued)) + own 51ms", "fleet 205ms (pressure 1.00 × 4", "next grpc://b:1 2024ms"}},
	{name: "the fleet's soonest start is half the whole prompt's prefill: half the charge",
		a:     waitWorker{holds: 3072, limit: 8, queue: 4096, run: 4 * time.Second, rate: 20000},
		b:     waitWorker{limit: 8, queue: 2048, run: 4 * time.Second, rate: 20000},
		fleet: 4, want: "A", reason: []string{"fleet 102ms (pressure 0.50 × 4", "soonest start 102ms < whole prefill 205ms", "next grpc://b:1 717ms"}},
	{name: "every engine full, A's lane 500ms longer than B's: the charge for the uneven lane outweighs the copied prefix",
		a:     waitWorker{holds: 3072, inFlight: 8, limit: 8, queue: 20000, run: 4 * time.Second, rate: 20000},
		b:     waitWorker{inFlight: 8, limit: 8, run: 4 * time.Second, rate: 20000},
		fleet: 4, uneven: 1, want: "B", reason: []string{"expects 1524ms = max(slot 500ms (1 ahead), lane 0ms (0 queued)) + own 205ms", "next grpc://a:1 1756ms"},
		absent: []string{"uneven"}},
	{name: "every engine full, A's lane 100ms longer than B's: a small lead costs less than the copied prefix",
		a:     waitWorker{holds: 3072, inFlight: 8, limit: 8, queue: 12000, run: 4 * time.Second, rate: 20000},
		b:     waitWorker{inFlight: 8, limit: 8, run: 4 * time.Second, rate: 20000},
		fleet: 4, uneven: 1, want: "A", reason: []string{"lane 600ms (12000 queued)) + own 51ms", "+ uneven 100ms (pressure 1.00 × 1 × (start 600ms − soonest 500ms))", "next grpc://b:1 1524ms"}},
	{name: "the fleet's soonest start is half the whole prompt's prefill: half the uneven charge too",
		a:     waitWorker{holds: 3072, limit: 8, queue: 4096, run: 4 * time.Second, rate: 20000},
		b:     waitWorker{limit: 8, queue: 2048, run: 4 * time.Second, rate: 20000},
		fleet: 4, uneven: 2, want: "A", reason: []string{"fleet 102ms (pressure 0.50 × 4", "uneven 102ms (pressure 0.50 × 2 × (start 205ms − soonest 102ms))", "next grpc://b:1 717ms"}},
	{name: "the fleet keeps up: no uneven charge, however uneven the lanes",
		a:     waitWorker{holds: 3072, limit: 8, queue: 2000, run: 4 * time.Second, rate: 20000},
		b:     waitWorker{limit: 8, run: 4 * time.Second, rate: 20000},
		fleet: 4, uneven: 4, want: "A", reason: []string{"expects 151ms = max(slot 0ms, lane 100ms (2000 queued)) + own 51ms (4096 prompt − 3072 cached)", "next grpc://b:1 205ms"},
		absent: []string{"fleet", "uneven"}},
	{name: "start-up: a worker carrying two requests beside an idle one that holds nothing: the idle one, whatever the terms",
		a:     waitWorker{holds: 3072, inFlight: 2, limit: 256, run: 800 * time.Millisecond, rate: 20000},
		b:     waitWorker{limit: 256, run: 800 * time.Millisecond, rate: 20000, empty: true},
		fleet: 4, want: "B", reason: []string{"imbalance: grpc://b:1 is idle and holds nothing while a worker carries 2; it expects 205ms", "next grpc://a:1 51ms"}},
	{name: "start-up: one request beside an idle worker that holds nothing: the terms",
		a:     waitWorker{holds: 3072, inFlight: 1, limit: 256, run: 800 * time.Millisecond, rate: 20000},
		b:     waitWorker{limit: 256, run: 800 * time.Millisecond, rate: 20000, empty: true},
		fleet: 4, want: "A", reason: []string{"cache_hit: grpc://a:1 expects 51ms"}},
	{name: "start-up: two requests beside an idle worker that holds something: the terms",
		a:     waitWorker{holds: 3072, inFlight: 2, limit: 256, run: 800 * time.Millisecond, rate: 20000},
		b:     waitWorker{limit: 256, run: 800 * time.Millisecond, rate: 20000},
		fleet: 4, want: "A", reason: []string{"cache_hit: grpc://a:1 expects 51ms"}},
	{name: "start-up: two requests on the worker that holds nothing: the terms",
		a:     waitWorker{holds: 3072, limit: 256, run: 800 * time.Millisecond, rate: 20000},
		b:     waitWorker{inFlight: 2, limit: 256, run: 800 * time.Millisecond, rate: 20000, empty: true},
		fleet: 4, want: "A", reason: []string{"cache_hit: grpc://a:1 expects 51ms"}},
	{name: "every engine is priced at the fleet's mean prefill rate",
		a: waitWorker{queue: 4000, rate: 10000}, b: waitWorker{rate: 30000}, fleet: 0, want: "B",
		reason: []string{"own 205ms", "next grpc://a:1 405ms"}},
	{name: "an engine not yet timed is assumed as fast as the fleet's others",
		a: waitWorker{queue: 4000, rate: 40000}, b: waitWorker{}, fleet: 0, want: "B", reason: []string{"own 102ms", "next grpc://a:1 202ms"}},
	{name: "below the limit, an engine whose step grows with its batch: the busy cached engine loses to a quiet one holding less (its own wait, and what it slows)",
		a:    waitWorker{holds: 3072, inFlight: 9, limit: 16, run: 800 * time.Millisecond, rate: 20000, steps: stepLine(10*time.Millisecond, 6*time.Millisecond)},
		b:    waitWorker{holds: 2048, inFlight: 1, limit: 16, run: 800 * time.Millisecond, rate: 20000, steps: stepLine(10*time.Millisecond, 6*time.Millisecond)},
		step: 1.5, want: "B", reason: []string{"own 102ms (4096 prompt − 2048 cached) + step 33ms (1.5 steps) + slows 60ms (1 running beside it)", "next grpc://a:1 696ms"}},
	{name: "what a request slows decides: a cold quiet engine over the cached one running six, whose batch it would slow more than its prefill costs",
		a:    waitWorker{holds: 3072, inFlight: 6, limit: 16, run: 800 * time.Millisecond, rate: 20000, steps: stepLine(9*time.Millisecond, 4*time.Millisecond)},
		b:    waitWorker{inFlight: 2, limit: 16, run: 800 * time.Millisecond, rate: 20000, steps: stepLine(9*time.Millisecond, 4*time.Millisecond)},
		step: 1.5, want: "B", reason: []string{"own 205ms (4096 prompt − 0 cached) + step 31ms (1.5 steps) + slows 80ms (2 running beside it)", "next grpc://a:1 347ms"}},
	{name: "the same without the step's charge: the longer match",
		a:    waitWorker{holds: 3072, inFlight: 9, limit: 16, run: 800 * time.Millisecond, rate: 20000, steps: stepLine(10*time.Millisecond, 6*time.Millisecond)},
		b:    waitWorker{holds: 2048, inFlight: 1, limit: 16, run: 800 * time.Millisecond, rate: 20000, steps: stepLine(10*time.Millisecond, 6*time.Millisecond)},
		step: 0, want: "A", reason: []string{"own 51ms (4096 prompt − 3072 cached)", "next grpc://b:1 102ms"}, absent: []string{"step"}},
	{name: "a step that hardly grows with the batch (the simulator's) decides nothing",
		a:    waitWorker{holds: 3072, inFlight: 9, limit: 16, run: 800 * time.Millisecond, rate: 20000, steps: stepLine(8*time.Millisecond, 50*time.Microsecond)},
		b:    waitWorker{holds: 2048, inFlight: 1, limit: 16, run: 800 * time.Millisecond, rate: 20000, steps: stepLine(8*time.Millisecond, 50*time.Microsecond)},
		step: 1.5, want: "A", reason: []string{"own 51ms (4096 prompt − 3072 cached) + step 13ms (1.5 steps)", "next grpc://b:1 115ms"}},
	{name: "a step that grows gently: what a request slows counts in proportion to how much it lengthens a step, here 4.8% of a lone request's, so the cached engine keeps it",
		a:    waitWorker{holds: 3072, inFlight: 8, limit: 16, run: 800 * time.Millisecond, rate: 20000, steps: stepLine(20*time.Millisecond, time.Millisecond)},
		b:    waitWorker{holds: 2048, inFlight: 1, limit: 16, run: 800 * time.Millisecond, rate: 20000, steps: stepLine(20*time.Millisecond, time.Millisecond)},
		step: 1.5, want: "A", reason: []string{"+ slows 38ms (8 running beside it, × 0.48: a request lengthens a step 4.8%)", "next grpc://b:1 140ms"}},
	{name: "every engine is priced at the fleet's mean step, at its own batch: here A's, for B has decoded nothing",
		a:    waitWorker{holds: 3072, inFlight: 9, limit: 16, run: 800 * time.Millisecond, rate: 20000, steps: stepLine(10*time.Millisecond, 6*time.Millisecond)},
		b:    waitWorker{holds: 2048, inFlight: 1, limit: 16, run: 800 * time.Millisecond, rate: 20000},
		step: 1.5, want: "B", reason: []string{"+ step 33ms (1.5 steps) + slows 60ms (1 running beside it)", "next grpc://a:1 696ms"}},
	{name: "an engine at its limit decodes its limit: the step is priced at the limit",
		a:    waitWorker{holds: 3072, inFlight: 20, limit: 16, run: 100 * time.Millisecond, rate: 20000, steps: stepLine(10*time.Millisecond, 6*time.Millisecond), together: true},
		b:    waitWorker{holds: 3072, inFlight: 20, limit: 16, run: 100 * time.Millisecond, rate: 20000, steps: stepLine(10*time.Millisecond, 6*time.Millisecond), together: true},
		step: 1.5, want: "A", reason: []string{"+ step 159ms (1.5 steps) + slows 900ms (15 running beside it)"}},
}

// waitFleet builds workers A and B in the state the case gives, inside a
// synctest bubble: each serves requests lasting run (or runs) and one
// prefill at rate, so the router learns their speed as it would from real
// traffic; then both take the case's load, their requests in flight
// started as the case says.
func waitFleet(t *testing.T, prompt []uint32, a, b waitWorker, serve func(ids []uint32, w *workers.Worker)) (*workers.Worker, *workers.Worker) {
	t.Helper()
	mk := func(url string, c waitWorker) *workers.Worker {
		w := workers.NewWorker(url, workers.ProtocolSGLang, workers.RoleRegular,
			workers.ModelInfo{MaxRunningRequests: c.limit, KVCapacityTokens: c.kv}, nil, nil)
		w.SetEngineLoad(workers.Load{UsedTokens: c.held})
		if !c.empty {
			serve(caTokens(99, 64), w)
		}
		if c.holds > 0 {
			serve(prompt[:c.holds], w)
		}
		for _, d := range c.steps {
			policytest.Decode(w, d.batch, 10, d.perToken)
		}
		if c.rate > 0 {
			const n = 4000
			p := w.Prefilling(n)
			time.Sleep(time.Duration(float64(n) / float64(c.rate) * float64(time.Second)))
			p.Prefilled()
		}
		runs := c.runs
		if c.run > 0 {
			runs = []time.Duration{c.run}
		}
		for _, d := range runs {
			release := w.Acquire()
			time.Sleep(d)
			release()
		}
		t.Cleanup(w.Prefilling(c.queue).End)
		return w
	}
	wa, wb := mk("grpc://a:1", a), mk("grpc://b:1", b)
	// Each request in flight starts age before the selection, oldest first.
	type start struct {
		age time.Duration
		w   *workers.Worker
	}
	var starts []start
	for _, f := range []struct {
		c waitWorker
		w *workers.Worker
	}{{a, wa}, {b, wb}} {
		for i := range f.c.inFlight {
			s := start{w: f.w}
			if !f.c.together && f.c.limit > 0 {
				s.age = time.Duration(f.c.inFlight-1-i) * f.c.run / time.Duration(f.c.limit)
			}
			starts = append(starts, s)
		}
	}
	slices.SortStableFunc(starts, func(x, y start) int { return cmp.Compare(y.age, x.age) })
	for i, s := range starts {
		if i > 0 {
			time.Sleep(starts[i-1].age - s.age)
		}
		t.Cleanup(s.w.Acquire())
	}
	if len(starts) > 0 {
		time.Sleep(starts[len(starts)-1].age)
	}
	return wa, wb
}

func TestWaitModeSpecification(t *testing.T) {
	prompt := caTokens(7, 4096)
	for _, tc := range waitCases {
		for _, pol := range []string{"cache_aware", "vllm_cache_aware"} {
			t.Run(pol+"/"+tc.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					o := policy.DefaultOptions()
					o.CacheAware.Mode, o.CacheAware.FleetWeight, o.CacheAware.UnevenWeight = policy.ModeWait, tc.fleet, tc.uneven
					o.VllmCacheAware.Mode, o.VllmCacheAware.FleetWeight, o.VllmCacheAware.UnevenWeight = policy.ModeWait, tc.fleet, tc.uneven
					o.CacheAware.StepWeight, o.VllmCacheAware.StepWeight = tc.step, tc.step
					p, err := policy.New(pol, o)
					if err != nil {
						t.Fatal(err)
					}
					serve := func(ids []uint32, w *workers.Worker) {
						if _, err := p.Select(context.Background(), &policy.Request{InputIDs: ids}, workers.Views([]*workers.Worker{w})); err != nil {
							t.Fatal(err)
						}
					}
					a, b := waitFleet(t, prompt, tc.a, tc.b, serve)
					d, err := p.Select(context.Background(), &policy.Request{InputIDs: prompt, ComputesPrompt: tc.computes, DryRun: true}, workers.Views([]*workers.Worker{a, b}))
					if err != nil {
						t.Fatal(err)
					}
					if got := map[*workers.Worker]string{a: "A", b: "B"}[d.Worker]; got != tc.want {
						t.Fatalf("chose %s, want %s: %s", got, tc.want, d.Why())
					}
					prefix := d.Branch + ": " + d.Worker.URL() + " "
					if rest, ok := strings.CutPrefix(d.Why(), prefix); !ok || !strings.HasPrefix(rest, "expects ") && !strings.Contains(rest, "; it expects ") {
						t.Errorf("reason %q does not start with the branch and the worker's expected wait", d.Why())
					}
					for _, part := range tc.reason {
						if !strings.Contains(d.Why(), part) {
							t.Errorf("reason %q lacks %q", d.Why(), part)
						}
					}
					for _, part := range tc.absent {
						if strings.Contains(d.Why(), part) {
							t.Errorf("reason %q says %q", d.Why(), part)
						}
					}
				})
			})
		}
	}
}

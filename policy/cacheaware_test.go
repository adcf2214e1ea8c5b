package policy_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

var (
	_ policy.Policy   = (*policy.CacheAware)(nil)
	_ policy.Observer = (*policy.CacheAware)(nil)
	_ policy.Runner   = (*policy.CacheAware)(nil)
)

// caTokens returns n token ids no other caTokens call with another seed
// shares, so prompts built from them share exactly what the test intends.
func caTokens(seed, n int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = uint32(seed*100_000 + i + 1)
	}
	return ids
}

func caJoin(parts ...[]uint32) []uint32 { return slices.Concat(parts...) }

// newCA builds a cache_aware policy in the threshold mode, whose rules
// most tests here specify, with the other defaults (page 16, threshold
// 0.3, balance 64 / 1.5) changed by edit. The default mode is wait, whose
// rule wait_test.go specifies.
func newCA(t *testing.T, edit func(*policy.Options)) *policy.CacheAware {
	t.Helper()
	o := policy.DefaultOptions()
	o.CacheAware.Mode = policy.ModeThreshold
	if edit != nil {
		edit(&o)
	}
	p, err := policy.NewCacheAware(o)
	if err != nil {
		t.Fatalf("NewCacheAware: %v", err)
	}
	return p
}

func caSelect(t *testing.T, p *policy.CacheAware, ids []uint32, ws ...*workers.Worker) policy.Decision {
	t.Helper()
	d, err := p.Select(context.Background(), &policy.Request{InputIDs: ids}, workers.Views(ws))
	if err != nil {
		t.Fatalf("Select: %v", err)
	}
	return d
}

func caExplain(t *testing.T, p *policy.CacheAware, ids []uint32, ws ...*workers.Worker) policy.Decision {
	t.Helper()
	d, err := p.Select(context.Background(), &policy.Request{InputIDs: ids, DryRun: true}, workers.Views(ws))
	if err != nil {
		t.Fatalf("Select (dry run): %v", err)
	}
	return d
}

// place routes each prompt to w alone, so it lands in w's tree.
func place(t *testing.T, p *policy.CacheAware, w *workers.Worker, prompts ...[]uint32) {
	t.Helper()
	for _, ids := range prompts {
		caSelect(t, p, ids, w)
	}
}

func wantDecision(t *testing.T, d policy.Decision, w *workers.Worker, branch string, predicted int) {
	t.Helper()
	if d.Worker != w || d.Branch != branch || d.PredictedCachedTokens != predicted {
		t.Fatalf("decision = %s %s predicted %d (%s), want %s %s predicted %d",
			d.Worker.URL(), d.Branch, d.PredictedCachedTokens, d.Why(), w.URL(), branch, predicted)
	}
	if d.Why() == "" {
		t.Fatalf("decision has no reason")
	}
}

func TestCacheAwareOptions(t *testing.T) {
	p := newCA(t, nil)
	if p.Name() != "cache_aware" {
		t.Fatalf("Name() = %q", p.Name())
	}
	if _, err := policy.NewCacheAware(policy.Options{}); err == nil {
		t.Fatal("zero Options accepted: zero is a value, and a zero budget is refused")
	}
}

func TestCacheAwareRepeatedPromptHitsSameWorker(t *testing.T) {
	for _, tc := range []struct {
		name      string
		length    int
		predicted int // on repeat: whole pages of the prompt, short of its last token's (see reusable)
		branch    string
	}{
		{"several pages and a partial one", 50, 48, "cache_hit"},
		{"exactly one page: the engine computes it again", 16, 0, "cache_hit"},
		{"exactly four pages: the last computed again", 64, 48, "cache_hit"},
		{"one page and one token: 16/17 ≥ 0.3", 17, 16, "cache_hit"},
		{"shorter than a page: nothing reusable", 15, 0, "cache_miss"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := fleet(3)
			p := newCA(t, nil)
			prompt := caTokens(1, tc.length)
			first := caSelect(t, p, prompt, ws...)
			wantDecision(t, first, ws[0], "cache_miss", 0)
			// Other workers get busier and the chosen one carries a request,
			// within the balance thresholds: the cache still wins.
			defer busy(ws[0], 1)()
			defer busy(ws[1], 2)()
			for range 3 {
				d := caSelect(t, p, prompt, ws...)
				want := ws[0]
				if tc.branch == "cache_miss" {
					want = ws[2] // least loaded
				}
				wantDecision(t, d, want, tc.branch, tc.predicted)
			}
		})
	}
}

func TestCacheAwareThresholdUsesPromptLength(t *testing.T) {
	// w0 holds three pages (48 tokens) of the shared prefix.
	shared := caTokens(1, 48)
	for _, tc := range []struct {
		name   string
		prompt []uint32
		branch string
	}{
		{"48 of 160 tokens = 0.3: hit", caJoin(shared, caTokens(2, 112)), "cache_hit"},
		{"48 of 161 tokens < 0.3: miss", caJoin(shared, caTokens(2, 113)), "cache_miss"},
		{"48 of 60 tokens: hit", caJoin(shared, caTokens(2, 12)), "cache_hit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := fleet(2)
			p := newCA(t, nil)
			place(t, p, ws[0], shared)
			d := caSelect(t, p, tc.prompt, ws...)
			if d.Branch != tc.branch {
				t.Fatalf("branch = %s (%s), want %s", d.Branch, d.Why(), tc.branch)
			}
			if got := d.Matched.Of(ws[0].URL()); got != 48 {
				t.Fatalf("Matched[w0] = %d, want 48 (all: %v)", got, d.Matched)
			}
		})
	}
}

func TestCacheAwareMissFallbacks(t *testing.T) {
	// Trees: w0 three prompts, w1 one, w2 two (64 tokens each). Loads: w0 0,
	// w1 5, w2 2. The new prompt shares one page (16 of 80 tokens, 0.2) with
	// w0's first prompt: a miss.
	setup := func(t *testing.T, fallback string) (*policy.CacheAware, []*workers.Worker, func()) {
		ws := fleet(3)
		p := newCA(t, func(o *policy.Options) { o.CacheAware.CacheMissFallback = fallback })
		place(t, p, ws[0], caTokens(10, 64), caTokens(11, 64), caTokens(12, 64))
		place(t, p, ws[1], caTokens(20, 64))
		place(t, p, ws[2], caTokens(30, 64), caTokens(31, 64))
		r1, r2 := busy(ws[1], 5), busy(ws[2], 2)
		return p, ws, func() { r1(); r2() }
	}
	prompt := caJoin(caTokens(10, 16), caTokens(99, 64))
	for _, tc := range []struct {
		fallback  string
		want      int
		predicted int
	}{
		{policy.FallbackSmallestTree, 1, 0}, // fewest tree tokens, though the busiest
		{policy.FallbackLeastLoaded, 0, 16}, // least loaded (it also holds the shared page)
	} {
		t.Run(tc.fallback, func(t *testing.T) {
			p, ws, release := setup(t, tc.fallback)
			defer release()
			d := caSelect(t, p, prompt, ws...)
			wantDecision(t, d, ws[tc.want], "cache_miss", tc.predicted)
			if !strings.Contains(d.Why(), tc.fallback) {
				t.Fatalf("reason %q does not name the fallback", d.Why())
			}
		})
	}
}

func TestCacheAwareFallbackTieBreaks(t *testing.T) {
	t.Run("least_loaded: equal loads go to the smaller tree", func(t *testing.T) {
		ws := fleet(3)
		p := newCA(t, nil)
		place(t, p, ws[0], caTokens(1, 64))
		place(t, p, ws[1], caTokens(2, 32))
		place(t, p, ws[2], caTokens(3, 48))
		wantDecision(t, caSelect(t, p, caTokens(9, 64), ws...), ws[1], "cache_miss", 0)
	})
	for _, mode := range []string{policy.ModeCost, policy.ModeWait} {
		t.Run(mode+" mode: equal prices, matches and loads go to the smaller tree", func(t *testing.T) {
			ws := fleet(3)
			p := newCA(t, func(o *policy.Options) { o.CacheAware.Mode = mode })
			place(t, p, ws[0], caTokens(1, 64))
			place(t, p, ws[1], caTokens(2, 32))
			place(t, p, ws[2], caTokens(3, 48))
			wantDecision(t, caSelect(t, p, caTokens(9, 64), ws...), ws[1], "cache_miss", 0)
		})
	}
	t.Run("smallest_tree: equal trees go to the less loaded", func(t *testing.T) {
		ws := fleet(3)
		p := newCA(t, func(o *policy.Options) { o.CacheAware.CacheMissFallback = policy.FallbackSmallestTree })
		defer busy(ws[0], 2)()
		defer busy(ws[1], 1)()
		defer busy(ws[2], 3)()
		wantDecision(t, caSelect(t, p, caTokens(9, 64), ws...), ws[1], "cache_miss", 0)
	})
}

func TestCacheAwareImbalanceSwitch(t *testing.T) {
	// w0 holds the prompt and carries load hot; w1 carries cold. Imbalanced
	// iff hot-cold > 64 AND hot > 1.5 × cold: then load wins over the cache.
	// (The gap is twice the mean load within [32, 64]; on two workers twice
	// the mean is hot+cold ≥ hot-cold, so it is 64 wherever the difference
	// could pass it: SMG's rule.)
	for _, tc := range []struct {
		name       string
		hot, cold  int
		imbalanced bool
	}{
		{"abs exactly at 64 (64 vs 0)", 64, 0, false},
		{"abs just past (65 vs 0)", 65, 0, true},
		{"abs at 64, rel past (192 vs 128)", 192, 128, false},
		{"abs just past, rel past (193 vs 128)", 193, 128, true},
		{"abs past, rel exactly at 1.5 (195 vs 130)", 195, 130, false},
		{"abs past, rel just past (196 vs 130)", 196, 130, true},
		{"abs past, rel far below (300 vs 230)", 300, 230, false},
		{"rel past, abs far below (10 vs 1)", 10, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := fleet(2)
			p := newCA(t, nil)
			prompt := caTokens(1, 64)
			place(t, p, ws[0], prompt)
			defer busy(ws[0], tc.hot)()
			defer busy(ws[1], tc.cold)()
			d := caSelect(t, p, prompt, ws...)
			if !tc.imbalanced {
				wantDecision(t, d, ws[0], "cache_hit", 48) // the last page is computed again
				return
			}
			// The prediction is what the least loaded worker holds: nothing.
			wantDecision(t, d, ws[1], "imbalance", 0)
			// Its path was inserted all the same.
			if got := caExplain(t, p, prompt, ws...).Matched.Of(ws[1].URL()); got != 64 {
				t.Fatalf("after imbalance routing, w1 holds %d tokens of the prompt, want 64", got)
			}
		})
	}
}

func TestCacheAwareEqualMatchesGoToLessLoaded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		loads [3]int
		want  int
	}{
		{"w1 less loaded", [3]int{3, 1, 0}, 1},
		{"w0 less loaded", [3]int{1, 3, 0}, 0},
		{"equal loads: first candidate", [3]int{2, 2, 0}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := fleet(3)
			p := newCA(t, nil)
			prompt := caTokens(1, 80)
			place(t, p, ws[0], prompt)
			place(t, p, ws[1], prompt)
			// w2 is idle but holds only a shorter match.
			place(t, p, ws[2], prompt[:32])
			for i, n := range tc.loads {
				defer busy(ws[i], n)()
			}
			wantDecision(t, caSelect(t, p, prompt, ws...), ws[tc.want], "cache_hit", 64) // the last page is computed again
		})
	}
}

func TestCacheAwareLongerMatchBeatsLoadWhenBalanced(t *testing.T) {
	ws := fleet(2)
	p := newCA(t, nil)
	prompt := caTokens(1, 96)
	place(t, p, ws[0], prompt)
	place(t, p, ws[1], prompt[:64])
	defer busy(ws[0], 60)()
	wantDecision(t, caSelect(t, p, prompt, ws...), ws[0], "cache_hit", 80) // the last page is computed again
}

func TestCacheAwareNeverChoosesUnhealthy(t *testing.T) {
	ws := fleet(3)
	p := newCA(t, nil)
	prompt := caTokens(1, 64)
	place(t, p, ws[0], prompt)
	place(t, p, ws[1], prompt[:32])
	ws[0].SetHealthy(false)

	d := caSelect(t, p, prompt, ws...)
	wantDecision(t, d, ws[1], "cache_hit", 32)
	if got := d.Matched.Of(ws[0].URL()); got != 64 {
		t.Fatalf("Matched[unhealthy w0] = %d, want 64: Explain shows what was passed over", got)
	}

	ws[1].SetHealthy(false)
	d = caSelect(t, p, prompt, ws...)
	if d.Worker != ws[2] {
		t.Fatalf("chose %s, want the only healthy worker %s", d.Worker.URL(), ws[2].URL())
	}

	// Back to health with its tree intact: w0 wins again.
	ws[0].SetHealthy(true)
	wantDecision(t, caSelect(t, p, prompt, ws...), ws[0], "cache_hit", 48)

	for _, w := range ws {
		w.SetHealthy(false)
	}
	if _, err := p.Select(context.Background(), &policy.Request{InputIDs: prompt}, workers.Views(ws)); !errors.Is(err, policy.ErrNoHealthyWorker) {
		t.Fatalf("all unhealthy: err = %v, want ErrNoHealthyWorker", err)
	}
}

func TestCacheAwareForget(t *testing.T) {
	ws := fleet(2)
	p := newCA(t, nil)
	prompt := caTokens(1, 64)
	place(t, p, ws[1], prompt)
	p.Forget(ws[1].URL())
	if got := p.TreeStats().TenantTokens[ws[1].URL()]; got != 0 {
		t.Fatalf("after Forget, w1 holds %d tokens", got)
	}
	wantDecision(t, caSelect(t, p, prompt, ws...), ws[0], "cache_miss", 0)
}

func TestCacheAwareDryRunLeavesNoTrace(t *testing.T) {
	ws := fleet(2)
	p := newCA(t, nil)
	prompt := caTokens(1, 64)

	for range 2 {
		d := caExplain(t, p, prompt, ws...)
		wantDecision(t, d, ws[0], "cache_miss", 0)
		if d.Matched.Len() != 2 {
			t.Fatalf("Matched = %v, want an entry per candidate", d.Matched)
		}
	}
	if s := p.TreeStats(); s.Tokens != 0 {
		t.Fatalf("dry runs inserted: tree holds %d tokens", s.Tokens)
	}

	// The real selection behaves as if the dry runs never happened: a miss
	// that inserts; a dry run now explains a hit without changing anything.
	defer busy(ws[0], 1)()
	wantDecision(t, caSelect(t, p, prompt, ws...), ws[1], "cache_miss", 0)
	wantDecision(t, caExplain(t, p, prompt, ws...), ws[1], "cache_hit", 48)
	if got := p.TreeStats().TenantTokens; got[ws[0].URL()] != 0 || got[ws[1].URL()] != 64 {
		t.Fatalf("tenant tokens = %v, want only w1 with 64", got)
	}
}

func TestCacheAwareObserve(t *testing.T) {
	// P1 = X Y and P2 = X Z, where X, Y and Z are two pages each; w0 holds
	// both. The engine then reports that only the first page of P1 was
	// cached: it evicted the rest of X, and with it everything below.
	// Each prompt ends with a token past its last page, so that all its
	// pages are reusable (see reusable).
	x, y, z := caTokens(1, 32), caTokens(2, 32), caTokens(3, 32)
	p1, p2 := caJoin(x, y, caTokens(5, 1)), caJoin(x, z, caTokens(6, 1))
	p1w := caJoin(x, y, caTokens(4, 32), caTokens(7, 1)) // P1's pages and two more

	type step struct {
		prompt   []uint32
		outcome  policy.Outcome
		after    map[string]int // prompt (by name) → tokens w0 is predicted to hold afterwards
		accuracy policy.Accuracy
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"exact prediction changes nothing", []step{{
			prompt: p1, outcome: policy.Outcome{CachedTokens: 64},
			after:    map[string]int{"P1": 64, "P2": 64},
			accuracy: policy.Accuracy{Observations: 1, ExactMatches: 1},
		}}},
		{"fewer cached than predicted trims below the report, keeps the served prompt", []step{{
			prompt: p1, outcome: policy.Outcome{CachedTokens: 16},
			// Z is gone; X is whole again, re-cached with P1.
			after:    map[string]int{"P1": 64, "P2": 32},
			accuracy: policy.Accuracy{Observations: 1, Overpredicted: 1, AbsErrorTokens: 48},
		}}},
		{"a report inside a page rounds down to the page; other branches stay", []step{{
			prompt: p1, outcome: policy.Outcome{CachedTokens: 40},
			after:    map[string]int{"P1": 64, "P2": 64}, // Z hangs below the kept X
			accuracy: policy.Accuracy{Observations: 1, Overpredicted: 1, AbsErrorTokens: 24},
		}}},
		{"more cached than predicted is counted, nothing to fix", []step{{
			prompt: p1w, outcome: policy.Outcome{CachedTokens: 80},
			after:    map[string]int{"P1": 64, "P2": 64, "P1W": 96},
			accuracy: policy.Accuracy{Observations: 1, Underpredicted: 1, AbsErrorTokens: 16},
		}}},
		{"failure without a report undoes the speculative insert", []step{{
			prompt: p1w, outcome: policy.Outcome{Err: errors.New("unavailable")},
			after:    map[string]int{"P1": 64, "P2": 64, "P1W": 64},
			accuracy: policy.Accuracy{},
		}}},
		{"failure with a report was admitted: handled as served", []step{{
			prompt: p1w, outcome: policy.Outcome{CachedTokens: 16, Err: errors.New("aborted")},
			after:    map[string]int{"P1": 64, "P2": 32, "P1W": 96},
			accuracy: policy.Accuracy{Observations: 1, Overpredicted: 1, AbsErrorTokens: 48},
		}}},
		{"a success with no report (an embedding) is not counted and keeps the insert", []step{{
			prompt: p1w, outcome: policy.Outcome{Unreported: true},
			after:    map[string]int{"P1": 64, "P2": 64, "P1W": 96},
			accuracy: policy.Accuracy{},
		}}},
		{"a failure with no report is undone as any failure", []step{{
			prompt: p1w, outcome: policy.Outcome{Unreported: true, Err: errors.New("unavailable")},
			after:    map[string]int{"P1": 64, "P2": 64, "P1W": 64},
			accuracy: policy.Accuracy{},
		}}},
		{"accuracy accumulates", []step{
			{prompt: p1, outcome: policy.Outcome{CachedTokens: 64},
				accuracy: policy.Accuracy{Observations: 1, ExactMatches: 1}},
			{prompt: p2, outcome: policy.Outcome{CachedTokens: 32},
				accuracy: policy.Accuracy{Observations: 2, ExactMatches: 1, Overpredicted: 1, AbsErrorTokens: 32}},
			{prompt: p1w, outcome: policy.Outcome{CachedTokens: 96},
				accuracy: policy.Accuracy{Observations: 3, ExactMatches: 1, Overpredicted: 1, Underpredicted: 1, AbsErrorTokens: 64}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := fleet(1)
			p := newCA(t, nil)
			place(t, p, ws[0], p1, p2)
			names := map[string][]uint32{"P1": p1, "P2": p2, "P1W": p1w}
			for i, s := range tc.steps {
				req := &policy.Request{InputIDs: s.prompt}
				d, err := p.Select(context.Background(), req, workers.Views(ws))
				if err != nil {
					t.Fatal(err)
				}
				p.Observe(req, d, s.outcome)
				for name, want := range s.after {
					if got := caExplain(t, p, names[name], ws...).PredictedCachedTokens; got != want {
						t.Errorf("step %d: %s predicted %d, want %d", i, name, got, want)
					}
				}
				if got := p.Accuracy(); got != s.accuracy {
					t.Errorf("step %d: accuracy = %+v, want %+v", i, got, s.accuracy)
				}
			}
		})
	}
}

func TestCacheAwareObserveIgnoresDryRun(t *testing.T) {
	ws := fleet(1)
	p := newCA(t, nil)
	prompt := caTokens(1, 64)
	place(t, p, ws[0], prompt)
	req := &policy.Request{InputIDs: prompt, DryRun: true}
	d, err := p.Select(context.Background(), req, workers.Views(ws))
	if err != nil {
		t.Fatal(err)
	}
	p.Observe(req, d, policy.Outcome{CachedTokens: 0})
	p.Observe(&policy.Request{InputIDs: prompt}, policy.Decision{}, policy.Outcome{})
	if got := p.Accuracy(); got != (policy.Accuracy{}) {
		t.Fatalf("accuracy = %+v after dry-run observations", got)
	}
	if got := caExplain(t, p, prompt, ws...).PredictedCachedTokens; got != 48 {
		t.Fatalf("prediction = %d after dry-run observation, want 48 (the last page is computed again)", got)
	}
}

// TestCacheAwareForgottenWorkerStaysForgotten: a request that completes on a
// worker after the router forgot it (removal drains, then forgets, while the
// request's outcome may still be on its way) puts nothing back in the tree.
func TestCacheAwareForgottenWorkerStaysForgotten(t *testing.T) {
	ws := fleet(2)
	p := newCA(t, nil)
	prompt := caTokens(1, 64)
	req := &policy.Request{InputIDs: prompt}
	d, err := p.Select(context.Background(), req, workers.Views(ws[:1]))
	if err != nil {
		t.Fatal(err)
	}
	ws[0].SetDraining(true)
	p.Forget(ws[0].URL())
	p.Observe(req, d, policy.Outcome{CachedTokens: 0, OutputIDs: caTokens(9, 8)})
	if n, ok := p.TreeStats().TenantTokens[ws[0].URL()]; ok {
		t.Fatalf("the forgotten worker is a tenant again, with %d tokens", n)
	}
}

// TestCacheAwareTreeStaysWithinBudget: the tree's budget holds after every
// selection, not only after Run's next eviction; Run still stops with its
// context.
func TestCacheAwareTreeStaysWithinBudget(t *testing.T) {
	ws := fleet(2)
	p := newCA(t, func(o *policy.Options) {
		o.CacheAware.MaxTreeSize = 64
		o.CacheAware.EvictionInterval = 5 * time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	for i := range 10 {
		place(t, p, ws[i%2], caTokens(i+1, 32))
		if s := p.TreeStats(); s.Tokens > 64 || s.Tokens == 0 {
			t.Fatalf("after prompt %d the tree holds %d tokens, budget 64", i, s.Tokens)
		}
	}
	cancel()
	testutil.Receive(t, done, "Run to return after its context ended")
}

func TestCacheAwareConcurrentUse(t *testing.T) {
	ws := fleet(4)
	p := newCA(t, func(o *policy.Options) {
		o.CacheAware.MaxTreeSize = 2048
		o.CacheAware.EvictionInterval = time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				req := &policy.Request{InputIDs: caJoin(caTokens(i%7, 48), caTokens(g*1000+i, 40)), DryRun: i%5 == 0}
				d, err := p.Select(context.Background(), req, workers.Views(ws))
				if errors.Is(err, policy.ErrNoHealthyWorker) {
					continue // the health flapping below can take all four down
				}
				if err != nil {
					t.Error(err)
					return
				}
				release := d.Worker.Acquire()
				p.Observe(req, d, policy.Outcome{CachedTokens: d.PredictedCachedTokens / 2})
				release()
				if i%50 == 0 {
					ws[g%4].SetHealthy(i%100 != 0)
				}
			}
		})
	}
	wg.Wait()
	cancel()
	<-done
}

func TestCacheAwareReasonOnDemand(t *testing.T) {
	ws := fleet(2)
	p := newCA(t, nil)
	prompt := caTokens(1, 64)
	place(t, p, ws[0], prompt)
	dry := caExplain(t, p, prompt, ws...)
	if dry.Reason == "" {
		t.Fatal("a dry run (Explain) has no Reason: Explain reads the field")
	}
	d := caSelect(t, p, prompt, ws...)
	if d.Reason != "" {
		t.Fatalf("a routed decision built its Reason %q: it is built only when Why asks", d.Reason)
	}
	if d.Why() != dry.Why() {
		t.Fatalf("Why() = %q, want what the dry run said: %q", d.Why(), dry.Why())
	}
	if got := d.Matched.Of(ws[0].URL()); got != 64 {
		t.Fatalf("Matched[w0] = %d, want 64", got)
	}
}

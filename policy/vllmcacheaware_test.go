package policy_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

var (
	_ policy.Policy    = (*policy.VllmCacheAware)(nil)
	_ policy.Runner    = (*policy.VllmCacheAware)(nil)
	_ policy.Forgetter = (*policy.VllmCacheAware)(nil)
)

// newVCA builds a vllm_cache_aware policy in the threshold mode, whose
// rules most tests here specify, with the other defaults (block 16,
// threshold 0.3, load factor 1.25, chained keys) changed by edit. The
// default mode is wait, whose rule wait_test.go specifies.
func newVCA(t *testing.T, edit func(*policy.VllmCacheAwareConfig)) *policy.VllmCacheAware {
	t.Helper()
	o := policy.DefaultOptions()
	o.VllmCacheAware.Mode = policy.ModeThreshold
	if edit != nil {
		edit(&o.VllmCacheAware)
	}
	p, err := policy.NewVllmCacheAware(o)
	if err != nil {
		t.Fatalf("NewVllmCacheAware: %v", err)
	}
	return p
}

func vcaSelect(t *testing.T, p *policy.VllmCacheAware, req *policy.Request, ws ...*workers.Worker) policy.Decision {
	t.Helper()
	d, err := p.Select(context.Background(), req, workers.Views(ws))
	if err != nil {
		t.Fatalf("Select: %v", err)
	}
	return d
}

// vcaPlace routes each prompt to w alone, so its blocks are recorded for w.
func vcaPlace(t *testing.T, p *policy.VllmCacheAware, w *workers.Worker, prompts ...[]uint32) {
	t.Helper()
	for _, ids := range prompts {
		vcaSelect(t, p, &policy.Request{InputIDs: ids}, w)
	}
}

func TestVllmCacheAwareOptions(t *testing.T) {
	if p := newVCA(t, nil); p.Name() != "vllm_cache_aware" {
		t.Fatalf("Name() = %q", p.Name())
	}
	d := policy.DefaultOptions().VllmCacheAware
	if d.BlockSize != 16 || d.MaxBlocksPerBackend != 100_000 || d.EvictionInterval != time.Minute ||
		d.CacheThreshold != 0.3 || d.LoadFactor != 1.25 || d.BlockHash != policy.BlockHashChained {
		t.Fatalf("defaults %+v, want SMG's (and chained keys)", d)
	}
	if _, err := policy.NewVllmCacheAware(policy.Options{}); err == nil {
		t.Fatal("zero Options accepted: zero is a value, and a zero block size is refused")
	}
}

// TestVllmCacheAwareValidation is the range of every setting: the edges
// are accepted (zero where it means something), beyond them New names the
// flag.
func TestVllmCacheAwareValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*policy.VllmCacheAwareConfig)
		flag string // "" if valid
	}{
		{"block size 1", func(c *policy.VllmCacheAwareConfig) { c.BlockSize = 1 }, ""},
		{"block size 0", func(c *policy.VllmCacheAwareConfig) { c.BlockSize = 0 }, "--vllm-block-size"},
		{"one block per worker", func(c *policy.VllmCacheAwareConfig) { c.MaxBlocksPerBackend = 1 }, ""},
		{"no blocks per worker", func(c *policy.VllmCacheAwareConfig) { c.MaxBlocksPerBackend = 0 }, "--vllm-max-blocks-per-backend"},
		{"eviction interval 0: no periodic eviction", func(c *policy.VllmCacheAwareConfig) { c.EvictionInterval = 0 }, ""},
		{"negative eviction interval", func(c *policy.VllmCacheAwareConfig) { c.EvictionInterval = -time.Second }, "--vllm-eviction-interval-secs"},
		{"threshold 0", func(c *policy.VllmCacheAwareConfig) { c.CacheThreshold = 0 }, ""},
		{"threshold 1", func(c *policy.VllmCacheAwareConfig) { c.CacheThreshold = 1 }, ""},
		{"threshold above 1", func(c *policy.VllmCacheAwareConfig) { c.CacheThreshold = 1.01 }, "--vllm-cache-threshold"},
		{"NaN threshold", func(c *policy.VllmCacheAwareConfig) { c.CacheThreshold = math.NaN() }, "--vllm-cache-threshold"},
		{"load factor 1", func(c *policy.VllmCacheAwareConfig) { c.LoadFactor = 1 }, ""},
		{"load factor under 1", func(c *policy.VllmCacheAwareConfig) { c.LoadFactor = 0.9 }, "--vllm-load-factor"},
		{"infinite load factor", func(c *policy.VllmCacheAwareConfig) { c.LoadFactor = math.Inf(1) }, "--vllm-load-factor"},
		{"position keys", func(c *policy.VllmCacheAwareConfig) { c.BlockHash = policy.BlockHashPosition }, ""},
		{"unknown keys", func(c *policy.VllmCacheAwareConfig) { c.BlockHash = "sha256" }, "--vllm-block-hash"},
		{"empty keys", func(c *policy.VllmCacheAwareConfig) { c.BlockHash = "" }, "--vllm-block-hash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.New("vllm_cache_aware", opts(func(o *policy.Options) { tc.edit(&o.VllmCacheAware) }))
			switch {
			case tc.flag == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.flag != "" && (err == nil || !strings.Contains(err.Error(), tc.flag)):
				t.Fatalf("err = %v, want one naming %s", err, tc.flag)
			}
		})
	}
}

func TestVllmCacheAwareRepeatedPromptHitsSameWorker(t *testing.T) {
	for _, tc := range []struct {
		name      string
		length    int
		predicted int // on repeat: the prompt's whole blocks, short of its last token's (see reusable)
		branch    string
	}{
		{"several blocks and a partial one", 50, 48, "cache_hit"},
		{"exactly one block: the engine computes it again", 16, 0, "cache_hit"},
		{"exactly 512 blocks: the last computed again", 8192, 8176, "cache_hit"},
		{"shorter than a block: nothing to reuse", 15, 0, "cache_miss"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := fleet(3)
			p := newVCA(t, nil)
			prompt := caTokens(1, tc.length)
			first := vcaSelect(t, p, &policy.Request{InputIDs: prompt}, ws...)
			wantDecision(t, first, ws[0], "cache_miss", 0)
			// The chosen worker carries a request and another two: the
			// average is 1, and 1 < 1.25 × 1.
			defer busy(ws[0], 1)()
			defer busy(ws[1], 2)()
			for range 3 {
				d := vcaSelect(t, p, &policy.Request{InputIDs: prompt}, ws...)
				want := ws[0]
				if tc.branch == "cache_miss" {
					want = ws[2] // least loaded
				}
				wantDecision(t, d, want, tc.branch, tc.predicted)
			}
		})
	}
}

// TestVllmCacheAwareThreshold: the ratio is matched blocks over the
// prompt's whole blocks, and must exceed the threshold (SMG's >).
func TestVllmCacheAwareThreshold(t *testing.T) {
	shared := caTokens(1, 48) // w0 holds these 3 blocks
	for _, tc := range []struct {
		name      string
		threshold float64
		prompt    []uint32
		branch    string
	}{
		{"3 of 10 blocks = 0.3: miss", 0.3, caJoin(shared, caTokens(2, 112)), "cache_miss"},
		{"3 of 10 blocks and a partial one: still 0.3", 0.3, caJoin(shared, caTokens(2, 127)), "cache_miss"},
		{"3 of 9 blocks: hit", 0.3, caJoin(shared, caTokens(2, 96)), "cache_hit"},
		{"threshold 0: 3 of 100 blocks is a hit", 0, caJoin(shared, caTokens(2, 1552)), "cache_hit"},
		{"threshold 0: no block matched is a miss", 0, caTokens(3, 160), "cache_miss"},
		{"threshold 1: a full match is a miss", 1, shared, "cache_miss"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := fleet(2)
			p := newVCA(t, func(c *policy.VllmCacheAwareConfig) { c.CacheThreshold = tc.threshold })
			vcaPlace(t, p, ws[0], shared)
			d := vcaSelect(t, p, &policy.Request{InputIDs: tc.prompt}, ws...)
			if d.Branch != tc.branch {
				t.Fatalf("branch = %s (%s), want %s", d.Branch, d.Why(), tc.branch)
			}
			if got, want := d.Matched.Of(ws[0].URL()), map[bool]int{true: 48, false: 0}[tc.prompt[0] == shared[0]]; got != want {
				t.Fatalf("Matched[w0] = %d, want %d (all: %v)", got, want, d.Matched)
			}
		})
	}
}

// TestVllmCacheAwareLoadFactor: w0 holds the prompt; it goes there while
// w0's load is below LoadFactor × the average load of the healthy workers,
// or is the lowest load; else to the least loaded (branch "overloaded").
func TestVllmCacheAwareLoadFactor(t *testing.T) {
	for _, tc := range []struct {
		name   string
		factor float64
		loads  []int // w0 first
		want   int
		branch string
	}{
		{"idle fleet", 1.25, []int{0, 0}, 0, "cache_hit"},
		{"one request on w0 (limit 0.625)", 1.25, []int{1, 0}, 1, "overloaded"},
		{"equal loads", 1.25, []int{2, 2}, 0, "cache_hit"},
		{"equal loads, factor 1: still the lowest load", 1, []int{2, 2}, 0, "cache_hit"},
		{"just under (4 < 1.25 × 3.5)", 1.25, []int{4, 3}, 0, "cache_hit"},
		{"at the limit (5 = 1.25 × 4): not below", 1.25, []int{5, 3}, 1, "overloaded"},
		{"factor 2 allows it", 2, []int{5, 3}, 0, "cache_hit"},
		{"overloaded goes to the least loaded of three", 1.25, []int{9, 4, 2}, 2, "overloaded"},
		{"least loaded ties go to the earlier", 1.25, []int{9, 2, 2}, 1, "overloaded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := fleet(len(tc.loads))
			p := newVCA(t, func(c *policy.VllmCacheAwareConfig) { c.LoadFactor = tc.factor })
			prompt := caTokens(1, 64)
			vcaPlace(t, p, ws[0], prompt)
			for i, l := range tc.loads {
				defer busy(ws[i], l)()
			}
			d := vcaSelect(t, p, &policy.Request{InputIDs: prompt}, ws...)
			predicted := 0
			if tc.want == 0 {
				predicted = 48 // all four blocks but the last, which the engine computes again
			}
			wantDecision(t, d, ws[tc.want], tc.branch, predicted)
			if tc.branch == "overloaded" && !strings.Contains(d.Why(), ws[0].URL()) {
				t.Fatalf("reason %q does not name the overloaded worker", d.Why())
			}
		})
	}
}

// limitedFleet builds a worker per limit, each reporting that running-request
// limit (0: none reported).
func limitedFleet(limits ...int) []*workers.Worker {
	ws := make([]*workers.Worker, len(limits))
	for i, n := range limits {
		ws[i] = workers.NewWorker(fmt.Sprintf("grpc://127.0.0.1:%d", 9000+i), workers.ProtocolVLLM,
			workers.RoleRegular, workers.ModelInfo{MaxRunningRequests: n}, nil, nil)
	}
	return ws
}

// TestVllmCacheAwareBoundByRunningLimit is the load bound on engines that
// report how many requests they run at once: w0 holds the prompt; below its
// limit it keeps the request even past LoadFactor × the average (the request
// starts at once there, and moving it would throw the cache away), unless it
// carries more than twice the average and one request more; at its limit
// SMG's load factor judges, as it does when any engine reports no limit.
// While an engine is idle and holds no block, w0 keeps a request only if it
// carries at most one: a burst then reaches every engine. Rows marked warm
// have every other worker hold a prompt of its own.
func TestVllmCacheAwareBoundByRunningLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits []int // w0 first; 0: not reported
		loads  []int
		warm   bool
		want   int
		branch string
	}{
		{name: "8 slots, 7 running against an average of 4 (over ×1.25): room left, the cache",
			limits: []int{8, 8, 8, 8}, loads: []int{7, 3, 3, 3}, want: 0, branch: "cache_hit"},
		{name: "8 slots, at its limit against an average of 4.25: the least loaded",
			limits: []int{8, 8, 8, 8}, loads: []int{8, 3, 3, 3}, want: 1, branch: "overloaded"},
		{name: "8 slots, past its limit, but under ×1.25 of a fleet that queues: the cache",
			limits: []int{8, 8, 8, 8}, loads: []int{10, 9, 9, 8}, want: 0, branch: "cache_hit"},
		{name: "8 slots, past its limit and ×1.25: the least loaded",
			limits: []int{8, 8, 8, 8}, loads: []int{14, 9, 9, 8}, want: 3, branch: "overloaded"},
		{name: "2 slots, one running beside idle engines: the cache, the request starts at once",
			limits: []int{2, 2, 2, 2}, loads: []int{1, 0, 0, 0}, want: 0, branch: "cache_hit"},
		{name: "2 slots, full beside idle engines: an idle one",
			limits: []int{2, 2, 2, 2}, loads: []int{2, 0, 0, 0}, want: 1, branch: "overloaded"},
		{name: "256 slots, a conversation's engine at 24 against an average of 18.5: the cache",
			limits: []int{256, 256, 256, 256}, loads: []int{24, 19, 17, 14}, want: 0, branch: "cache_hit"},
		{name: "256 slots, 38 against an average of 18.5 (twice it and one more): the cache",
			limits: []int{256, 256, 256, 256}, loads: []int{38, 16, 12, 8}, want: 0, branch: "cache_hit"},
		{name: "256 slots, 39 against an average of 18.75: past twice it and one more, the least loaded",
			limits: []int{256, 256, 256, 256}, loads: []int{39, 16, 12, 8}, want: 3, branch: "overloaded"},
		{name: "256 slots, a burst: one request beside idle empty engines stays with the cache",
			limits: []int{256, 256, 256, 256, 256, 256, 256, 256}, loads: []int{1, 0, 0, 0, 0, 0, 0, 0}, want: 0, branch: "cache_hit"},
		{name: "256 slots, a burst: two requests beside idle empty engines move",
			limits: []int{256, 256, 256, 256, 256, 256, 256, 256}, loads: []int{2, 0, 0, 0, 0, 0, 0, 0}, want: 1, branch: "overloaded"},
		{name: "256 slots, a burst held by half the fleet moves to the idle half",
			limits: []int{256, 256, 256, 256, 256, 256, 256, 256}, loads: []int{4, 4, 4, 4, 0, 0, 0, 0}, want: 4, branch: "overloaded"},
		{name: "256 slots, a burst on 7 engines of 8 (under ×1.25 of the average) moves to the eighth",
			limits: []int{256, 256, 256, 256, 256, 256, 256, 256}, loads: []int{2, 2, 2, 2, 2, 2, 2, 0}, want: 7, branch: "overloaded"},
		{name: "8 slots, 7 running beside an idle engine that holds blocks: room left, the cache",
			limits: []int{8, 8, 8, 8}, loads: []int{7, 3, 3, 0}, warm: true, want: 0, branch: "cache_hit"},
		{name: "8 slots, 7 running beside an idle engine that holds nothing: the idle one",
			limits: []int{8, 8, 8, 8}, loads: []int{7, 3, 3, 0}, want: 3, branch: "overloaded"},
		{name: "one engine reports no limit: SMG's load factor alone (7 against an average of 4)",
			limits: []int{8, 8, 8, 0}, loads: []int{7, 3, 3, 3}, want: 1, branch: "overloaded"},
		{name: "no engine reports a limit: SMG's load factor alone",
			limits: []int{0, 0, 0, 0}, loads: []int{7, 3, 3, 3}, want: 1, branch: "overloaded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := limitedFleet(tc.limits...)
			p := newVCA(t, nil)
			prompt := caTokens(1, 64)
			vcaPlace(t, p, ws[0], prompt)
			if tc.warm {
				for i, w := range ws[1:] {
					vcaPlace(t, p, w, caTokens(10+i, 64))
				}
			}
			for i, l := range tc.loads {
				defer busy(ws[i], l)()
			}
			d := vcaSelect(t, p, &policy.Request{InputIDs: prompt}, ws...)
			predicted := 0
			if tc.want == 0 {
				predicted = 48 // all four blocks but the last, which the engine computes again
			}
			wantDecision(t, d, ws[tc.want], tc.branch, predicted)
		})
	}
	t.Run("the reasons name the rule that decided", func(t *testing.T) {
		for _, tc := range []struct {
			loads []int
			warm  bool
			want  string
		}{
			{[]int{7, 3, 3, 3}, true, "load 7, past ×1.25 the average 4.00 but below its running-request limit 8 and within twice the average and one more"},
			{[]int{7, 3, 3, 0}, false, "but carries 7 while an engine is idle and holds no block; least loaded grpc://127.0.0.1:9003 (load 0)"},
		} {
			ws := limitedFleet(8, 8, 8, 8)
			p := newVCA(t, nil)
			prompt := caTokens(1, 64)
			vcaPlace(t, p, ws[0], prompt)
			if tc.warm {
				for i, w := range ws[1:] {
					vcaPlace(t, p, w, caTokens(10+i, 64))
				}
			}
			for i, l := range tc.loads {
				defer busy(ws[i], l)()
			}
			d := vcaSelect(t, p, &policy.Request{InputIDs: prompt, DryRun: true}, ws...)
			if !strings.Contains(d.Why(), tc.want) {
				t.Errorf("loads %v: reason %q, want it to say %q", tc.loads, d.Why(), tc.want)
			}
		}
	})
}

// TestVllmCacheAwareBurstReachesEveryEngine places a burst of
// conversations' first turns on 8 engines of 256 slots, all in flight at
// once, each starting with the same 1,000-token system prompt (bench's
// multiturn workload): the burst ends evenly spread. SMG's rule alone kept
// it on 7 engines, the eighth idle.
func TestVllmCacheAwareBurstReachesEveryEngine(t *testing.T) {
	for _, users := range []int{128, 256} {
		t.Run(fmt.Sprintf("%d conversations", users), func(t *testing.T) {
			ws := limitedFleet(256, 256, 256, 256, 256, 256, 256, 256)
			p := newVCA(t, nil)
			system := caTokens(1, 1000)
			got := map[string]int{}
			for u := range users {
				d := vcaSelect(t, p, &policy.Request{InputIDs: caJoin(system, caTokens(100+u, 128))}, ws...)
				got[d.Worker.URL()]++
				defer d.Worker.Acquire()()
			}
			if c := cov(spread(ws, got)); c > 0.05 {
				t.Errorf("first turns per engine %v: load CoV %.3f, want ≤ 0.05", spread(ws, got), c)
			}
		})
	}
}

// TestVllmCacheAwareRecordsTheChosenWorker: whatever the branch, the prompt
// is recorded for the worker it went to, so the next request of the
// conversation finds it there; a DryRun records nothing.
func TestVllmCacheAwareRecordsTheChosenWorker(t *testing.T) {
	ws := fleet(2)
	p := newVCA(t, nil)
	turn1 := caTokens(1, 100) // 6 blocks
	turn2 := caJoin(turn1, caTokens(2, 60))

	dry := vcaSelect(t, p, &policy.Request{InputIDs: turn1, DryRun: true}, ws...)
	if st := p.IndexStats(); st.Entries != 0 {
		t.Fatalf("a dry run recorded %d blocks (decision %s)", st.Entries, dry.Why())
	}

	release := busy(ws[0], 1)
	first := vcaSelect(t, p, &policy.Request{InputIDs: turn1}, ws...)
	wantDecision(t, first, ws[1], "cache_miss", 0)
	release()
	// Turn 2 shares 6 of its 10 blocks with turn 1 on w1.
	d := vcaSelect(t, p, &policy.Request{InputIDs: turn2}, ws...)
	wantDecision(t, d, ws[1], "cache_hit", 96)
	if d.Matched.Of(ws[0].URL()) != 0 || d.Matched.Of(ws[1].URL()) != 96 {
		t.Fatalf("Matched = %v", d.Matched)
	}
	if st := p.IndexStats(); st.BackendBlocks[ws[1].URL()] != 10 || st.BackendBlocks[ws[0].URL()] != 0 {
		t.Fatalf("index holds %v, want 10 blocks on w1 only", st.BackendBlocks)
	}
}

// TestVllmCacheAwareEqualMatchesGoToLessLoaded: two workers hold the same
// prefix; the less loaded one wins, and with equal loads the earlier.
func TestVllmCacheAwareEqualMatchesGoToLessLoaded(t *testing.T) {
	ws := fleet(3)
	p := newVCA(t, nil)
	prompt := caTokens(1, 64)
	vcaPlace(t, p, ws[0], prompt)
	vcaPlace(t, p, ws[1], prompt)
	d := vcaSelect(t, p, &policy.Request{InputIDs: prompt, DryRun: true}, ws...)
	wantDecision(t, d, ws[0], "cache_hit", 48) // the last block is computed again
	defer busy(ws[0], 1)()
	defer busy(ws[2], 1)()
	d = vcaSelect(t, p, &policy.Request{InputIDs: prompt, DryRun: true}, ws...)
	wantDecision(t, d, ws[1], "cache_hit", 48)
}

// TestVllmCacheAwareUnavailableWorkers: an unhealthy or excluded worker is
// never chosen, though Matched still shows what it holds.
func TestVllmCacheAwareUnavailableWorkers(t *testing.T) {
	ws := fleet(3)
	p := newVCA(t, nil)
	prompt := caTokens(1, 64)
	vcaPlace(t, p, ws[0], prompt)
	vcaPlace(t, p, ws[1], prompt)
	ws[0].SetHealthy(false)
	d := vcaSelect(t, p, &policy.Request{InputIDs: prompt, Exclude: []string{ws[1].URL()}}, ws...)
	wantDecision(t, d, ws[2], "cache_miss", 0)
	if d.Matched.Of(ws[0].URL()) != 64 || d.Matched.Of(ws[1].URL()) != 64 {
		t.Fatalf("Matched = %v, want the unavailable workers' 64 tokens shown", d.Matched)
	}
	_, err := p.Select(context.Background(), &policy.Request{InputIDs: prompt, Exclude: []string{ws[1].URL(), ws[2].URL()}}, workers.Views(ws))
	if !errors.Is(err, policy.ErrNoHealthyWorker) {
		t.Fatalf("all unavailable: err = %v", err)
	}
}

// TestVllmCacheAwareKVEvents: Confirm, Unconfirm and Clear apply what an
// engine reports, and the next prediction follows.
func TestVllmCacheAwareKVEvents(t *testing.T) {
	ws := fleet(2)
	p := newVCA(t, nil)
	path := caTokens(1, 160) // 10 blocks
	predicted := func() int {
		t.Helper()
		return vcaSelect(t, p, &policy.Request{InputIDs: path, DryRun: true}, ws...).Matched.Of(ws[1].URL())
	}
	steps := []struct {
		name string
		do   func()
		want int
	}{
		{"stored: 10 blocks", func() { p.Confirm(ws[1].URL(), path) }, 160},
		{"removed: the last 3", func() { p.Unconfirm(ws[1].URL(), path, 3) }, 112},
		{"removed: 0 pages is nothing", func() { p.Unconfirm(ws[1].URL(), path, 0) }, 112},
		{"removed: the last 2 of the 7-block path", func() { p.Unconfirm(ws[1].URL(), path[:112], 2) }, 80},
		{"removed: more pages than the path has", func() { p.Unconfirm(ws[1].URL(), path[:80], 9) }, 0},
		{"stored again, with a partial block", func() { p.Confirm(ws[1].URL(), path[:40]) }, 32},
		{"cleared", func() { p.Clear(ws[1].URL()) }, 0},
		{"stored after a clear", func() { p.Confirm(ws[1].URL(), path) }, 160},
		{"forgotten", func() { p.Forget(ws[1].URL()) }, 0},
	}
	for _, s := range steps {
		s.do()
		if got := predicted(); got != s.want {
			t.Fatalf("%s: w1 predicted to hold %d tokens, want %d", s.name, got, s.want)
		}
	}
}

// TestVllmCacheAwarePositionKeys: with --vllm-block-hash position the
// false match of SMG's position keys shows: w0 served A+Z+C+D and B+X, and a request for
// B+Y+C+D (and a token more) is predicted to find all 4 blocks there;
// chained keys predict 1.
func TestVllmCacheAwarePositionKeys(t *testing.T) {
	a, b, c, d, x, y, z := caTokens(1, 16), caTokens(2, 16), caTokens(3, 16), caTokens(4, 16), caTokens(5, 16), caTokens(6, 16), caTokens(7, 16)
	for _, tc := range []struct {
		hash      string
		predicted int
	}{{policy.BlockHashPosition, 64}, {policy.BlockHashChained, 16}} {
		ws := fleet(1)
		p := newVCA(t, func(c *policy.VllmCacheAwareConfig) { c.BlockHash = tc.hash })
		vcaPlace(t, p, ws[0], caJoin(a, z, c, d), caJoin(b, x))
		got := vcaSelect(t, p, &policy.Request{InputIDs: caJoin(b, y, c, d, caTokens(8, 1)), DryRun: true}, ws...)
		if got.PredictedCachedTokens != tc.predicted {
			t.Errorf("%s keys: predicted %d tokens, want %d (%s)", tc.hash, got.PredictedCachedTokens, tc.predicted, got.Why())
		}
	}
}

// TestVllmCacheAwareRunEvicts: Run trims every worker to its budget each
// interval, not before; with no interval it only waits for ctx. The
// policy's clock is synctest's: the interval passes without being waited
// for.
func TestVllmCacheAwareRunEvicts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ws := fleet(1)
		const interval = 5 * time.Millisecond
		p := newVCA(t, func(c *policy.VllmCacheAwareConfig) {
			c.MaxBlocksPerBackend = 40
			c.EvictionInterval = interval
		})
		// 45 blocks: within the eighth of slack that recording allows.
		vcaPlace(t, p, ws[0], caTokens(1, 16*45))
		if n := p.IndexStats().BackendBlocks[ws[0].URL()]; n != 45 {
			t.Fatalf("before Run: %d blocks, want 45", n)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { p.Run(ctx); close(done) }()
		time.Sleep(interval - time.Nanosecond)
		synctest.Wait()
		if n := p.EvictedBlocks(); n != 0 {
			t.Fatalf("%d blocks evicted before the first interval", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		cancel()
		<-done
		if n := p.IndexStats().BackendBlocks[ws[0].URL()]; n != 40 || p.EvictedBlocks() != 5 {
			t.Fatalf("after one interval: %d blocks, %d evicted; want 40 and 5", n, p.EvictedBlocks())
		}

		idle := newVCA(t, func(c *policy.VllmCacheAwareConfig) { c.EvictionInterval = 0 })
		ctx, cancel = context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		idle.Run(ctx) // returns when ctx ends
	})
}

// BenchmarkVllmCacheAwareSelect is BenchmarkCacheAwareSelect's selection (a
// 1,792-token prompt whose first 1,536 tokens one worker holds, every
// worker holding the 1,024-token system prompt) for vllm_cache_aware, and
// the same with an 8K prompt: keys, a binary search per worker, loads and
// the record.
func BenchmarkVllmCacheAwareSelect(b *testing.B) {
	for _, tc := range []struct {
		workers, tail int
	}{{4, 256}, {64, 256}, {256, 256}, {8, 7168 - 512}} {
		b.Run(fmt.Sprintf("workers=%d/tokens=%d", tc.workers, 1536+tc.tail), func(b *testing.B) {
			ws := fleet(tc.workers)
			p, err := policy.NewVllmCacheAware(policy.DefaultOptions())
			if err != nil {
				b.Fatal(err)
			}
			system := caTokens(1, 1024)
			for i, w := range ws {
				if _, err := p.Select(context.Background(), &policy.Request{InputIDs: caJoin(system, caTokens(i+2, 512))}, workers.Views([]*workers.Worker{w})); err != nil {
					b.Fatal(err)
				}
			}
			req := &policy.Request{InputIDs: caJoin(system, caTokens(3, 512), caTokens(7, tc.tail))}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Select(context.Background(), req, workers.Views(ws)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

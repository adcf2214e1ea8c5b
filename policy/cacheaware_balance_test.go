package policy_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestCacheAwareSharedPrefixGoesByLoad is the rule for a match several
// workers provide equally: the request goes to the least loaded of them,
// and only a strictly longer match (or the imbalance rule) overrides load.
// The fleet is four workers; system is a 1,024-token prompt every
// conversation starts with, and each row says who holds what and how busy
// each worker is.
func TestCacheAwareSharedPrefixGoesByLoad(t *testing.T) {
	system := caTokens(1, 1024)
	own := caJoin(system, caTokens(2, 256)) // one conversation's earlier turn
	next := caJoin(own, caTokens(3, 128))   // its next turn
	newcomer := caJoin(system, caTokens(4, 128))
	for _, tc := range []struct {
		name      string
		holds     [4][]uint32 // what each worker's tree holds
		loads     [4]int
		prompt    []uint32
		want      int
		branch    string
		predicted int
	}{
		{
			name:   "three workers hold the shared system prompt equally: the least loaded gets the request",
			holds:  [4][]uint32{system, system, system, nil},
			loads:  [4]int{9, 3, 6, 0},
			prompt: newcomer, want: 1, branch: "cache_hit", predicted: 1024,
		},
		{
			name:   "the idle worker without the prompt does not join the tie",
			holds:  [4][]uint32{system, system, nil, nil},
			loads:  [4]int{20, 25, 0, 0},
			prompt: newcomer, want: 0, branch: "cache_hit", predicted: 1024,
		},
		{
			name:   "equal loads among the holders: the earlier candidate",
			holds:  [4][]uint32{nil, system, system, system},
			loads:  [4]int{0, 4, 4, 4},
			prompt: newcomer, want: 1, branch: "cache_hit", predicted: 1024,
		},
		{
			name:   "a longer match on one worker still wins: a conversation stays where its history is",
			holds:  [4][]uint32{system, own, system, system},
			loads:  [4]int{0, 30, 0, 0},
			prompt: next, want: 1, branch: "cache_hit", predicted: 1280,
		},
		{
			name:   "a longer match on a worker past the imbalance gap: load wins",
			holds:  [4][]uint32{system, own, system, system},
			loads:  [4]int{0, 33, 0, 0},
			prompt: next, want: 0, branch: "imbalance", predicted: 1024,
		},
		{
			name:   "every worker holds the prompt: a plain least-loaded choice",
			holds:  [4][]uint32{system, system, system, system},
			loads:  [4]int{7, 7, 2, 5},
			prompt: newcomer, want: 2, branch: "cache_hit", predicted: 1024,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := fleet(4)
			p := newCA(t, nil)
			for i, ids := range tc.holds {
				if ids != nil {
					place(t, p, ws[i], ids)
				}
			}
			for i, n := range tc.loads {
				defer busy(ws[i], n)()
			}
			wantDecision(t, caSelect(t, p, tc.prompt, ws...), ws[tc.want], tc.branch, tc.predicted)
		})
	}
}

// TestCacheAwareImbalanceScalesWithLoad is the imbalance rule at low and high
// total load with the defaults (64 / 1.5): the gap that counts is twice the
// fleet's mean load, at least 32 (half of 64) and at most 64. w0 holds the
// prompt; the others hold nothing; the row gives every worker's load.
func TestCacheAwareImbalanceScalesWithLoad(t *testing.T) {
	for _, tc := range []struct {
		name       string
		loads      [4]int
		imbalanced bool
	}{
		{"idle fleet: a handful on one worker is noise", [4]int{8, 0, 0, 0}, false},
		{"low load: the floor of 32 holds (32 vs 0)", [4]int{32, 0, 0, 0}, false},
		{"low load: just past the floor (33 vs 0)", [4]int{33, 0, 0, 0}, true},
		{"mean 20: 40 more than the least is not yet past twice it", [4]int{50, 10, 10, 10}, false},
		{"mean 20: 44 more than the least is", [4]int{52, 10, 10, 8}, true},
		{"high load: SMG's 64 caps the gap (mean 100, 64 more)", [4]int{140, 100, 84, 76}, false},
		{"high load: 65 more than the least is past it", [4]int{141, 100, 84, 76}, true},
		{"high load: past 64 but not 1.5× the least", [4]int{300, 250, 240, 230}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := fleet(4)
			p := newCA(t, nil)
			prompt := caTokens(1, 64)
			place(t, p, ws[0], prompt)
			for i, n := range tc.loads {
				defer busy(ws[i], n)()
			}
			d := caSelect(t, p, prompt, ws...)
			if !tc.imbalanced {
				wantDecision(t, d, ws[0], "cache_hit", 48) // the last page is computed again
				return
			}
			least := 0
			for i, n := range tc.loads {
				if n < tc.loads[least] {
					least = i
				}
			}
			wantDecision(t, d, ws[least], "imbalance", 0)
		})
	}
	t.Run("SMG's threshold stays the most the rule waits: 8 / 1.5", func(t *testing.T) {
		ws := fleet(2)
		p := newCA(t, func(o *policy.Options) { o.CacheAware.BalanceAbsThreshold = 8 })
		prompt := caTokens(1, 64)
		place(t, p, ws[0], prompt)
		defer busy(ws[0], 9)()
		wantDecision(t, caSelect(t, p, prompt, ws...), ws[1], "imbalance", 0)
	})
	t.Run("a threshold of 0: the relative rule alone", func(t *testing.T) {
		ws := fleet(2)
		p := newCA(t, func(o *policy.Options) { o.CacheAware.BalanceAbsThreshold = 0 })
		prompt := caTokens(1, 64)
		place(t, p, ws[0], prompt)
		defer busy(ws[0], 1)()
		wantDecision(t, caSelect(t, p, prompt, ws...), ws[1], "imbalance", 0)
	})
}

// TestCacheAwareConversationsShareASystemPrompt places a burst of
// conversations' first turns on 8 engines of 256 slots, all in flight at once, each
// starting with the same 1,000-token system prompt (bench's multiturn
// workload): the fleet ends evenly loaded, each conversation's next turn
// follows its first, and the system prompt was computed by each worker
// once. With 128 conversations (16 a worker) the first worker to hold the
// prompt took 33 before the balance rules moved any: twice its share, for
// the whole conversation (load CoV 0.58 in bench).
func TestCacheAwareConversationsShareASystemPrompt(t *testing.T) {
	for _, users := range []int{128, 256} {
		t.Run(fmt.Sprintf("%d conversations", users), func(t *testing.T) {
			ws := limitedFleet(256, 256, 256, 256, 256, 256, 256, 256)
			p := newCA(t, nil)
			system := caTokens(1, 1000)
			got := map[string]int{}
			first := make([]*workers.Worker, users)
			misses := 0
			for u := range first {
				d := caSelect(t, p, caJoin(system, caTokens(100+u, 128)), ws...)
				first[u] = d.Worker
				got[d.Worker.URL()]++
				if d.PredictedCachedTokens == 0 {
					misses++
				}
				defer d.Worker.Acquire()()
			}
			t.Logf("first turns per worker: %v, %d without the system prompt", spread(ws, got), misses)
			if cov := cov(spread(ws, got)); cov > 0.05 {
				t.Errorf("first turns %v: load CoV %.3f, want ≤ 0.05", spread(ws, got), cov)
			}
			if misses > len(ws) {
				t.Errorf("%d first turns found no system prompt, want at most one per worker (%d)", misses, len(ws))
			}
			for u := range 16 {
				prompt := caJoin(system, caTokens(100+u, 128), caTokens(900+u, 128))
				if d := caSelect(t, p, prompt, ws...); d.Worker != first[u] {
					t.Fatalf("conversation %d's second turn went to %s (%s), its first to %s", u, d.Worker.URL(), d.Why(), first[u].URL())
				}
			}
		})
	}
}

// TestCacheAwareSeedsIdleEmptyWorkers is the start-up rule: while a
// worker is idle and holds nothing in the tree, a worker carrying two
// requests is enough for the fleet to count as imbalanced, and the request
// goes to the idle one. Engines of 256 slots; w0 holds the prompt; rows
// marked warm have every other worker hold a prompt of its own.
func TestCacheAwareSeedsIdleEmptyWorkers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		loads    [4]int
		warm     bool
		noLimits bool // the engines report no running-request limit
		want     int
		branch   string
	}{
		{name: "no limits reported: SMG's rule alone, two requests beside idle empty workers stay",
			loads: [4]int{2, 0, 0, 0}, noLimits: true, want: 0, branch: "cache_hit"},
		{name: "one request beside idle empty workers: the cache",
			loads: [4]int{1, 0, 0, 0}, want: 0, branch: "cache_hit"},
		{name: "two requests beside idle empty workers: an idle one",
			loads: [4]int{2, 0, 0, 0}, want: 1, branch: "imbalance"},
		{name: "two requests beside idle workers that hold prompts: the cache (the gap of 32 holds)",
			loads: [4]int{2, 0, 0, 0}, warm: true, want: 0, branch: "cache_hit"},
		{name: "three workers busy alike, the fourth idle and empty: the fourth",
			loads: [4]int{20, 20, 20, 0}, want: 3, branch: "imbalance"},
		{name: "the empty worker is not idle: the cache",
			loads: [4]int{20, 20, 20, 1}, want: 0, branch: "cache_hit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := limitedFleet(256, 256, 256, 256)
			if tc.noLimits {
				ws = fleet(4)
			}
			wantHeldPrompt(t, newCA(t, nil), ws, tc.warm, tc.loads[:], tc.want, tc.branch)
		})
	}
	t.Run("Explain names the idle worker", func(t *testing.T) {
		ws := limitedFleet(256, 256)
		p := newCA(t, nil)
		prompt := caTokens(1, 64)
		place(t, p, ws[0], prompt)
		defer busy(ws[0], 2)()
		d := caExplain(t, p, prompt, ws...)
		want := "imbalance: grpc://127.0.0.1:9001 is idle and holds nothing while a worker carries 2"
		if d.Reason != want {
			t.Fatalf("reason %q, want %q", d.Reason, want)
		}
	})
}

// cov is the coefficient of variation of counts (population standard
// deviation over the mean), as bench reports load CoV.
func cov(counts []int) float64 {
	var sum, sq float64
	for _, c := range counts {
		sum += float64(c)
	}
	mean := sum / float64(len(counts))
	for _, c := range counts {
		sq += (float64(c) - mean) * (float64(c) - mean)
	}
	return math.Sqrt(sq/float64(len(counts))) / mean
}

// TestCacheAwareBalancesAgainstCapacity is the imbalance rule on engines
// that report how many requests they run at once: load counts as a share
// of that limit, so engines of 2 slots balance long before the absolute
// difference of 32 requests, and engines of 256 keep the absolute rule
// where the cached engine makes a request wait. w0
// holds the prompt; each row gives every worker's running-request limit
// (0: not reported) and load, and the worker that must serve it.
func TestCacheAwareBalancesAgainstCapacity(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits [4]int
		loads  [4]int
		capThr float64 // --balance-capacity-threshold; 0 means the default
		off    bool    // the capacity rule turned off (threshold 0)
		want   int
		branch string
	}{
		{name: "2 slots, the cached engine full, the others idle: an idle one, not a queue behind the cache",
			limits: [4]int{2, 2, 2, 2}, loads: [4]int{2, 0, 0, 0}, want: 1, branch: "imbalance"},
		{name: "2 slots, the cached engine has a slot free: the cache",
			limits: [4]int{2, 2, 2, 2}, loads: [4]int{1, 0, 0, 0}, want: 0, branch: "cache_hit"},
		{name: "2 slots, every engine queues: ×1.5 is still needed (3 against 2 of each limit is not past it)",
			limits: [4]int{2, 2, 2, 2}, loads: [4]int{6, 4, 4, 4}, want: 0, branch: "cache_hit"},
		{name: "2 slots, every engine queues, one a whole engine's worth more than ×1.5",
			limits: [4]int{2, 2, 2, 2}, loads: [4]int{7, 4, 4, 4}, want: 1, branch: "imbalance"},
		{name: "8 slots, 7 against idle: the cache",
			limits: [4]int{8, 8, 8, 8}, loads: [4]int{7, 0, 0, 0}, want: 0, branch: "cache_hit"},
		{name: "8 slots, 8 against idle: an idle one",
			limits: [4]int{8, 8, 8, 8}, loads: [4]int{8, 0, 0, 0}, want: 1, branch: "imbalance"},
		{name: "256 slots, 32 against idle: the cache (the absolute floor of 32 holds)",
			limits: [4]int{256, 256, 256, 256}, loads: [4]int{32, 0, 0, 0}, want: 0, branch: "cache_hit"},
		{name: "256 slots, 33 against idle, nothing queued: the cache (a swing, see TestCacheAwareSwingIsNotAHotSpot)",
			limits: [4]int{256, 256, 256, 256}, loads: [4]int{33, 0, 0, 0}, want: 0, branch: "cache_hit"},
		{name: "one engine reports no limit: counts alone judge, 2 against idle is noise",
			limits: [4]int{2, 2, 2, 0}, loads: [4]int{2, 0, 0, 0}, want: 0, branch: "cache_hit"},
		{name: "the rule turned off (threshold 0): counts alone judge",
			limits: [4]int{2, 2, 2, 2}, loads: [4]int{2, 0, 0, 0}, off: true, want: 0, branch: "cache_hit"},
		{name: "a threshold of 2: 2 slots wait for two engines' worth",
			limits: [4]int{2, 2, 2, 2}, loads: [4]int{3, 0, 0, 0}, capThr: 2, want: 0, branch: "cache_hit"},
		{name: "mixed limits: shares 1.0 to 0.375 are within one engine's worth",
			limits: [4]int{2, 8, 2, 8}, loads: [4]int{2, 3, 1, 4}, want: 0, branch: "cache_hit"},
		{name: "mixed limits: the least share wins (2 of 8), not the least count (1 of 2)",
			limits: [4]int{2, 8, 2, 8}, loads: [4]int{3, 4, 1, 2}, want: 3, branch: "imbalance"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := make([]*workers.Worker, 4)
			for i, n := range tc.limits {
				ws[i] = workers.NewWorker(fmt.Sprintf("grpc://127.0.0.1:%d", 9000+i), workers.ProtocolSGLang,
					workers.RoleRegular, workers.ModelInfo{MaxRunningRequests: n}, nil, nil)
			}
			p := newCA(t, func(o *policy.Options) {
				switch {
				case tc.off:
					o.CacheAware.BalanceCapacityThreshold = 0
				case tc.capThr > 0:
					o.CacheAware.BalanceCapacityThreshold = tc.capThr
				}
			})
			// Every worker holds a prompt: none is idle and empty (see
			// TestCacheAwareSeedsIdleEmptyWorkers).
			wantHeldPrompt(t, p, ws, true, tc.loads[:], tc.want, tc.branch)
		})
	}
	t.Run("Explain says the shares and the limit of the worker chosen", func(t *testing.T) {
		ws := make([]*workers.Worker, 2)
		for i := range ws {
			ws[i] = workers.NewWorker(fmt.Sprintf("grpc://127.0.0.1:%d", 9000+i), workers.ProtocolSGLang,
				workers.RoleRegular, workers.ModelInfo{MaxRunningRequests: 2}, nil, nil)
		}
		p := newCA(t, nil)
		prompt := caTokens(1, 64)
		place(t, p, ws[0], prompt)
		defer busy(ws[0], 2)()
		d := caExplain(t, p, prompt, ws...)
		want := "imbalance: loads 0.00..1.00 of the running-request limits differ by at least 1 and ×1.5; least loaded grpc://127.0.0.1:9001 (0 of 2)"
		if d.Reason != want {
			t.Fatalf("reason %q, want %q", d.Reason, want)
		}
	})
}

// wantHeldPrompt places a 64-token prompt on ws[0] (and, when warm, a
// prompt of their own on the others), gives the workers loads, and wants
// the prompt sent to ws[want] by branch: with the prompt's 64 tokens
// predicted cached when that is ws[0], none otherwise.
func wantHeldPrompt(t *testing.T, p *policy.CacheAware, ws []*workers.Worker, warm bool, loads []int, want int, branch string) {
	t.Helper()
	prompt := caTokens(1, 64)
	place(t, p, ws[0], prompt)
	if warm {
		for i, w := range ws[1:] {
			place(t, p, w, caTokens(10+i, 64))
		}
	}
	for i, n := range loads {
		defer busy(ws[i], n)()
	}
	predicted := 0
	if want == 0 {
		predicted = 48 // the prompt but its last page, which the engine computes again
	}
	wantDecision(t, caSelect(t, p, prompt, ws...), ws[want], branch, predicted)
}

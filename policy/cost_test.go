package policy_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// costWorker is one candidate's state in a cost-mode case: what its tree
// holds of the prompt, and its load as the router and the engine see it.
type costWorker struct {
	holds    int // leading prompt tokens the worker served before
	other    int // tokens of another prompt it served before
	inFlight int // requests this router has in flight there
	queue    int // prompt tokens sent there whose first token has not come
	held     int // KV tokens the engine's running requests hold (GetLoads)
	capacity int // the engine's KV capacity in tokens (0: not reported)
}

// costCases are the cost mode's rule, written as cases: a 1,024-token
// prompt, two workers A and B, and who wins with which reason.
var costCases = []struct {
	name      string
	a, b      costWorker
	weight    float64 // --cache-aware-decode-weight; 0 in the cases that leave it out
	evict     float64 // --cache-aware-evict-weight; 0 in the cases that leave it out
	want      string  // "A" or "B"
	branch    string
	reason    []string // parts of the chosen worker's reason
	threshold string   // where the threshold rule sends it, when the case is about the difference
}{
	{name: "nothing anywhere: the earlier worker", want: "A", branch: "cache_miss",
		reason: []string{"prefill 1024 (1024 prompt − 0 cached) + queue 0"}},
	{name: "nothing anywhere: the shorter prefill queue", a: costWorker{queue: 512}, want: "B", branch: "cache_miss"},
	{name: "a match is prefill saved", a: costWorker{holds: 768}, want: "A", branch: "cache_hit",
		reason: []string{"a:1 costs 256 = prefill 256 (1024 prompt − 768 cached) + queue 0"}},
	{name: "a match is worth less than the queue in front of it", a: costWorker{holds: 768, queue: 900}, want: "B", branch: "cache_miss"},
	{name: "a match is worth more than a shorter queue", a: costWorker{holds: 768, queue: 700}, want: "A", branch: "cache_hit",
		reason: []string{"queue 700", "; next grpc://b:1 costs 1024"}},
	{name: "a match below --cache-threshold still saves prefill", a: costWorker{holds: 256, inFlight: 1},
		want: "A", branch: "cache_hit", threshold: "B"},
	{name: "requests decoding, no prefill queued: the match wins where the threshold rule balances",
		a: costWorker{holds: 768, inFlight: 70}, want: "A", branch: "cache_hit", threshold: "B"},
	{name: "decode weight: held KV tells equal prefills apart", weight: 0.1,
		a: costWorker{held: 50_000}, b: costWorker{held: 10_000}, want: "B", branch: "cache_miss",
		reason: []string{"0.1 × held 10000"}},
	{name: "decode weight: held KV does not outweigh a match", weight: 0.1,
		a: costWorker{holds: 768, held: 2_000}, want: "A", branch: "cache_hit"},
	{name: "a full cache keeps only part of the match, and the rest of the prompt waits",
		a: costWorker{holds: 768, capacity: 2048, held: 1792}, b: costWorker{capacity: 100_000}, want: "B", branch: "cache_miss"},
	{name: "a queue longer than the cache's room does not take the match from it",
		a: costWorker{holds: 768, capacity: 4096, held: 1024, queue: 3500}, b: costWorker{capacity: 100_000, queue: 3500},
		want: "A", branch: "cache_hit", reason: []string{"prefill 256 (1024 prompt − 768 cached) + queue 3500"}},
	{name: "a cache with room keeps the whole match", evict: 1,
		a: costWorker{holds: 768, capacity: 4096, held: 1024, queue: 512}, b: costWorker{capacity: 100_000},
		want: "A", branch: "cache_hit", reason: []string{"prefill 256 (1024 prompt − 768 cached) + 1 × evict 48 + queue 512"}},
	{name: "a copy of the prompt in a full cache evicts as much as it writes", evict: 1,
		a: costWorker{other: 2048, capacity: 2048}, b: costWorker{capacity: 2048},
		want: "B", branch: "cache_miss", reason: []string{"costs 1024 = prefill 1024 (1024 prompt − 0 cached) + queue 0", "next grpc://a:1 costs 2048"}},
	{name: "in full caches, the rest of a prompt beside its prefix evicts less than a copy", evict: 1,
		a: costWorker{holds: 768, other: 1280, capacity: 2048}, b: costWorker{other: 2048, capacity: 2048},
		want: "A", branch: "cache_hit", reason: []string{"costs 512 = prefill 256 (1024 prompt − 768 cached) + 1 × evict 256 + queue 0"}},
	{name: "in full caches, a queue outweighs a prefix when a lost page costs one prefill", evict: 1,
		a: costWorker{holds: 768, other: 7424, capacity: 8192, queue: 2000}, b: costWorker{other: 8192, capacity: 8192},
		want: "B", branch: "cache_miss", reason: []string{"costs 2048 = prefill 1024 (1024 prompt − 0 cached) + 1 × evict 1024", "next grpc://a:1 costs 2512"}},
	{name: "in full caches, a prefix outweighs the queue when a lost page costs four", evict: 4,
		a: costWorker{holds: 768, other: 7424, capacity: 8192, queue: 2000}, b: costWorker{other: 8192, capacity: 8192},
		want: "A", branch: "cache_hit", reason: []string{"costs 3280 = prefill 256 (1024 prompt − 768 cached) + 4 × evict 256 + queue 2000", "next grpc://b:1 costs 5120"}},
	{name: "the match beyond what the cache can keep is named",
		a: costWorker{holds: 768, capacity: 1536, held: 1024}, b: costWorker{capacity: 1536, held: 1024, queue: 2048},
		want: "A", branch: "cache_hit", reason: []string{"(1024 prompt − 512 cached of 768 matched)", "wait 512"}},
}

// costFleet builds workers A and B in the state the case gives, with a
// policy's tree already holding their prompts' prefixes (through serve,
// which sends a prompt to one worker).
func costFleet(t *testing.T, prompt []uint32, a, b costWorker, serve func(ids []uint32, w *workers.Worker)) (*workers.Worker, *workers.Worker) {
	t.Helper()
	mk := func(url string, c costWorker) *workers.Worker {
		w := workers.NewWorker(url, workers.ProtocolSGLang, workers.RoleRegular,
			workers.ModelInfo{KVCapacityTokens: c.capacity}, nil, nil)
		if c.holds > 0 {
			serve(prompt[:c.holds], w)
		}
		if c.other > 0 {
			serve(caTokens(8, c.other), w)
		}
		for range c.inFlight {
			t.Cleanup(w.Acquire())
		}
		t.Cleanup(w.Prefilling(c.queue).End)
		w.SetEngineLoad(workers.Load{UsedTokens: c.held, MaxTotalTokens: c.capacity})
		return w
	}
	return mk("grpc://a:1", a), mk("grpc://b:1", b)
}

func TestCostModeSpecification(t *testing.T) {
	prompt := caTokens(7, 1024)
	for _, tc := range costCases {
		for _, pol := range []string{"cache_aware", "vllm_cache_aware"} {
			t.Run(pol+"/"+tc.name, func(t *testing.T) {
				build := func(mode string) policy.Policy {
					o := policy.DefaultOptions()
					o.CacheAware.Mode, o.CacheAware.DecodeWeight, o.CacheAware.EvictWeight = mode, tc.weight, tc.evict
					o.VllmCacheAware.Mode, o.VllmCacheAware.DecodeWeight, o.VllmCacheAware.EvictWeight = mode, tc.weight, tc.evict
					p, err := policy.New(pol, o)
					if err != nil {
						t.Fatal(err)
					}
					return p
				}
				for _, mode := range []string{policy.ModeCost, policy.ModeThreshold} {
					want := tc.want
					if mode == policy.ModeThreshold {
						if tc.threshold == "" {
							continue
						}
						want = tc.threshold
					}
					p := build(mode)
					serve := func(ids []uint32, w *workers.Worker) {
						if _, err := p.Select(context.Background(), &policy.Request{InputIDs: ids}, workers.Views([]*workers.Worker{w})); err != nil {
							t.Fatal(err)
						}
					}
					a, b := costFleet(t, prompt, tc.a, tc.b, serve)
					d, err := p.Select(context.Background(), &policy.Request{InputIDs: prompt, DryRun: true}, workers.Views([]*workers.Worker{a, b}))
					if err != nil {
						t.Fatal(err)
					}
					got := map[*workers.Worker]string{a: "A", b: "B"}[d.Worker]
					if got != want {
						t.Fatalf("%s mode chose %s, want %s: %s", mode, got, want, d.Why())
					}
					if mode == policy.ModeThreshold {
						continue
					}
					if d.Branch != tc.branch {
						t.Errorf("branch %q, want %q (%s)", d.Branch, tc.branch, d.Why())
					}
					if !strings.HasPrefix(d.Why(), tc.branch+": "+d.Worker.URL()+" costs ") {
						t.Errorf("reason %q does not start with the branch and the worker's cost", d.Why())
					}
					for _, part := range tc.reason {
						if !strings.Contains(d.Why(), part) {
							t.Errorf("reason %q lacks %q", d.Why(), part)
						}
					}
				}
			})
		}
	}
}

// TestCostModeSpreadsABurstByQueue: a burst of new prompts sent through the
// cost mode, each counted as queued prefill on its worker as the server
// counts it, spreads evenly, and its repeats return where they were sent.
func TestCostModeSpreadsABurstByQueue(t *testing.T) {
	o := policy.DefaultOptions()
	o.CacheAware.Mode = policy.ModeCost
	p, err := policy.NewCacheAware(o)
	if err != nil {
		t.Fatal(err)
	}
	var ws []*workers.Worker
	for _, u := range []string{"grpc://a:1", "grpc://b:1", "grpc://c:1", "grpc://d:1"} {
		ws = append(ws, workers.NewWorker(u, workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, nil, nil))
	}
	first := map[int]*workers.Worker{}
	count := map[*workers.Worker]int{}
	for i := range 8 {
		ids := caTokens(100+i, 512)
		d, err := p.Select(context.Background(), &policy.Request{InputIDs: ids}, workers.Views(ws))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Worker.Prefilling(len(ids) - d.PredictedCachedTokens).End)
		first[i] = d.Worker
		count[d.Worker]++
	}
	for _, w := range ws {
		if count[w] != 2 {
			t.Fatalf("a burst of 8 new prompts on 4 workers: %s got %d, want 2 each", w.URL(), count[w])
		}
	}
	for i := range 8 {
		ids := append(caTokens(100+i, 512), caTokens(200+i, 64)...)
		d, err := p.Select(context.Background(), &policy.Request{InputIDs: ids, DryRun: true}, workers.Views(ws))
		if err != nil {
			t.Fatal(err)
		}
		if d.Worker != first[i] {
			t.Errorf("prompt %d's next turn went to %s, not to %s which holds its 512 tokens: %s", i, d.Worker.URL(), first[i].URL(), d.Why())
		}
	}
}

package server_test

// Data-parallel ranks behind a router started with DP awareness: one
// simulated engine with four ranks, each rank a worker of its own.

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// startDPFleet starts one engine with four data-parallel ranks behind a
// cache_aware router, DP-aware or not.
func startDPFleet(t *testing.T, protocol string, dpAware bool) *fleet {
	t.Helper()
	return startFleet(t, fleetOptions{protocol: protocol, workers: 1, policy: "cache_aware",
		sim: func(_ int, c *sim.Config) {
			c.DPSize = 4
			c.KVCapacityTokens = 1 << 16
		},
		config: func(c *router.Config) { c.DPAware = dpAware }})
}

func listedWorkers(t *testing.T, f *fleet) []string {
	t.Helper()
	resp, err := f.admin.ListWorkers(context.Background(), &kvgatev1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, w := range resp.GetWorkers() {
		out = append(out, w.GetAddress())
	}
	return out
}

func TestDPAwareRanksAreWorkers(t *testing.T) {
	for _, protocol := range []string{"sglang", "vllm"} {
		t.Run(protocol, func(t *testing.T) {
			f := startDPFleet(t, protocol, true)
			url := f.workerURL(0)
			var want []string
			for r := range 4 {
				want = append(want, fmt.Sprintf("%s@%d", url, r))
			}
			if got := listedWorkers(t, f); !slices.Equal(got, want) {
				t.Fatalf("ListWorkers = %v, want %v", got, want)
			}

			// Conversations of three turns, each turn the previous prompt,
			// its answer and a new question: every turn lands on the rank
			// of the first, and the engine's rank serves it from its cache.
			e := f.sims[0].Engine()
			used := map[string]bool{}
			for c := range 8 {
				history := prompt(uint32(1+150*c), 96) // the built-in tokenizer has 2059 ids
				served := ""
				for turn := range 3 {
					r := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: history,
						SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(8), IgnoreEos: true}})
					w := r.complete.GetWorker()
					if turn == 0 {
						served = w
						used[w] = true
					} else {
						if w != served {
							t.Fatalf("conversation %d turn %d went to %s, its first turn to %s", c, turn, w, served)
						}
						if cached := r.complete.GetUsage().GetCachedTokens(); cached < 96 {
							t.Errorf("conversation %d turn %d: %d cached tokens, want >= 96", c, turn, cached)
						}
					}
					history = append(append(history, r.complete.GetOutputIds()...), prompt(uint32(1500+10*c+turn), 10)...)
				}
			}
			var cachedByRank [4]uint64
			for rank := range 4 {
				cachedByRank[rank] = e.Rank(rank).Stats().CachedPromptTokens
				name := fmt.Sprintf("%s@%d", url, rank)
				if used[name] && cachedByRank[rank] == 0 {
					t.Errorf("rank %d served conversations but reports no cache hits", rank)
				}
			}
			if len(used) < 2 {
				t.Errorf("8 conversations all went to %v; the ranks are not balanced", used)
			}

			// The engine's KV events, per rank, reach the rank's tenant: a
			// conversation's prompt is confirmed on its rank only.
			probe := prompt(1900, 64)
			r := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: probe,
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(4), IgnoreEos: true}})
			rankOf := r.complete.GetWorker()
			testutil.Eventually(t, "the probe's pages confirmed by its rank's events", func() bool {
				ex, err := f.admin.Explain(context.Background(), &kvgatev1.ExplainRequest{
					Request: &kvgatev1.ExplainRequest_Generate{Generate: &kvgatev1.GenerateRequest{InputIds: probe}}})
				if err != nil {
					t.Fatal(err)
				}
				ok := false
				for _, v := range ex.GetWorkers() {
					if v.GetAddress() == rankOf {
						ok = v.GetConfirmedTokens() >= 48
					} else if v.GetConfirmedTokens() > 0 {
						t.Fatalf("rank %s has %d confirmed tokens of a prompt it never saw", v.GetAddress(), v.GetConfirmedTokens())
					}
				}
				return ok
			})
			ws, err := f.admin.ListWorkers(context.Background(), &kvgatev1.ListWorkersRequest{})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range ws.GetWorkers() {
				if w.GetKvEvents().GetMode() != "events" {
					t.Errorf("%s: KV events mode %q", w.GetAddress(), w.GetKvEvents().GetMode())
				}
			}

			// One rank can leave by its name; the engine's address removes
			// the rest.
			if _, err := f.admin.RemoveWorker(context.Background(), &kvgatev1.RemoveWorkerRequest{Address: url + "@3"}); err != nil {
				t.Fatal(err)
			}
			if got := listedWorkers(t, f); !slices.Equal(got, want[:3]) {
				t.Fatalf("after removing rank 3: %v", got)
			}
			if _, err := f.admin.RemoveWorker(context.Background(), &kvgatev1.RemoveWorkerRequest{Address: url}); err != nil {
				t.Fatal(err)
			}
			if got := listedWorkers(t, f); len(got) != 0 {
				t.Fatalf("after removing the engine: %v", got)
			}
		})
	}
}

func TestWithoutDPAwarenessRanksAreOneWorker(t *testing.T) {
	f := startDPFleet(t, "vllm", false)
	if got := listedWorkers(t, f); !slices.Equal(got, []string{f.workerURL(0)}) {
		t.Fatalf("ListWorkers = %v, want the engine alone", got)
	}
	r := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(5, 40),
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(4), IgnoreEos: true}})
	if r.complete.GetWorker() != f.workerURL(0) {
		t.Fatalf("served by %s", r.complete.GetWorker())
	}
}

// Every policy treats rank targets as workers: requests go to ranks, and
// the policies that keep a conversation in place keep it on one rank.
func TestPoliciesRouteToRanks(t *testing.T) {
	for _, tc := range []struct {
		policy string
		sticky bool
	}{
		{"random", false}, {"round_robin", false}, {"power_of_two", false}, {"bucket", false},
		{"cache_aware", true}, {"vllm_cache_aware", true}, {"prefix_hash", true},
		{"consistent_hashing", true}, {"manual", true},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: "vllm", workers: 1, policy: tc.policy,
				sim:    func(_ int, c *sim.Config) { c.DPSize = 4 },
				config: func(c *router.Config) { c.DPAware = true }})
			ranks := listedWorkers(t, f)
			if len(ranks) != 4 {
				t.Fatalf("workers %v, want 4 ranks", ranks)
			}
			for c := range 4 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				ctx = metadata.AppendToOutgoingContext(ctx, "x-routing-key", fmt.Sprint("session-", c))
				served := ""
				for turn := range 2 {
					r, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(uint32(1+300*c), 64),
						SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2), IgnoreEos: true}})
					if err != nil || r.complete == nil {
						t.Fatalf("Generate: %v", err)
					}
					w := r.complete.GetWorker()
					if !slices.Contains(ranks, w) {
						t.Fatalf("served by %s, not one of the ranks %v", w, ranks)
					}
					if turn == 1 && tc.sticky && w != served {
						t.Errorf("session %d: turn 2 on %s, turn 1 on %s", c, w, served)
					}
					served = w
				}
				cancel()
			}
			if tc.policy == "consistent_hashing" {
				// x-target-worker takes a rank's name.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				ctx = metadata.AppendToOutgoingContext(ctx, "x-target-worker", ranks[2])
				r, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(7, 16),
					SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}})
				if err != nil || r.complete.GetWorker() != ranks[2] {
					t.Errorf("x-target-worker %s: served by %s, %v", ranks[2], r.complete.GetWorker(), err)
				}
			}
		})
	}
}

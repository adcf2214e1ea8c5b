package policy_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestCacheAwareBurstOfNewPrefixes compares the two cache-miss fallbacks on a
// burst of distinct new prompts that all stay in flight (nothing completes).
// It pins what each does; the end-to-end comparison belongs to the benchmarks.
func TestCacheAwareBurstOfNewPrefixes(t *testing.T) {
	const promptLen = 256
	type result map[string]int // worker URL → requests of the burst

	burst := func(t *testing.T, fallback string, n int, warm []int, lengths func(i int) int) ([]*workers.Worker, result) {
		ws := fleet(len(warm))
		p := newCA(t, func(o *policy.Options) { o.CacheAware.CacheMissFallback = fallback })
		for i, prompts := range warm {
			for j := range prompts {
				place(t, p, ws[i], caTokens(1000+100*i+j, promptLen))
			}
		}
		got := result{}
		var releases []func()
		for i := range n {
			d := caSelect(t, p, caTokens(5000+i, lengths(i)), ws...)
			got[d.Worker.URL()]++
			releases = append(releases, d.Worker.Acquire())
		}
		for _, r := range releases {
			r()
		}
		t.Logf("%-13s burst of %3d, warm trees %v: %v", fallback, n, warm, spread(ws, got))
		return ws, got
	}
	fixed := func(int) int { return promptLen }

	t.Run("cold fleet, equal prompts: both spread", func(t *testing.T) {
		// Each insert grows the chosen tree by one prompt, so smallest_tree
		// rotates just as least_loaded does.
		for _, fb := range []string{policy.FallbackSmallestTree, policy.FallbackLeastLoaded} {
			ws, got := burst(t, fb, 30, []int{0, 0, 0}, fixed)
			for _, w := range ws {
				if got[w.URL()] != 10 {
					t.Errorf("%s: %v, want 10 each", fb, spread(ws, got))
				}
			}
		}
	})

	t.Run("a new worker joins a warm fleet", func(t *testing.T) {
		// w0 and w1 hold 40 prompts each, w2 none. smallest_tree piles the
		// burst onto w2 until the imbalance rule (33 in flight vs 0: past
		// the gap of 32 at this load) moves the surplus; least_loaded
		// spreads it from the start.
		ws, got := burst(t, policy.FallbackSmallestTree, 40, []int{40, 40, 0}, fixed)
		if n := got[ws[2].URL()]; n < 33 {
			t.Errorf("smallest_tree: %v, want ≥ 33 on the new worker", spread(ws, got))
		}
		ws, got = burst(t, policy.FallbackLeastLoaded, 40, []int{40, 40, 0}, fixed)
		for _, w := range ws {
			if n := got[w.URL()]; n < 13 || n > 14 {
				t.Errorf("least_loaded: %v, want 13 or 14 each", spread(ws, got))
			}
		}
	})

	t.Run("a burst past the balance threshold", func(t *testing.T) {
		// smallest_tree piles onto w2 until the imbalance rule (load 33 vs
		// 0, past the gap of 32 at this load) takes over; from then on the
		// burst alternates between imbalance and the new worker, which
		// keeps the smallest tree.
		ws, got := burst(t, policy.FallbackSmallestTree, 120, []int{200, 200, 0}, fixed)
		if n := got[ws[2].URL()]; n < 65 {
			t.Errorf("smallest_tree: %v, want ≥ 65 on the new worker", spread(ws, got))
		}
	})

	t.Run("a burst sharing a long system prompt", func(t *testing.T) {
		// Not a miss at all: every request is a hit on the worker holding the
		// system prompt, whichever fallback, until the imbalance rule (33 in
		// flight vs 0) moves one request to each other worker; they then
		// hold the system prompt as well, the matches tie, and equal
		// matches go to the less loaded, so the burst evens out.
		system := caTokens(1, 2*promptLen)
		for _, fb := range []string{policy.FallbackSmallestTree, policy.FallbackLeastLoaded} {
			ws := fleet(3)
			p := newCA(t, func(o *policy.Options) { o.CacheAware.CacheMissFallback = fb })
			place(t, p, ws[0], system)
			got := result{}
			for i := range 100 {
				d := caSelect(t, p, caJoin(system, caTokens(5000+i, promptLen/4)), ws...)
				got[d.Worker.URL()]++
				defer d.Worker.Acquire()()
			}
			t.Logf("%-13s burst of 100 sharing a %d-token system prompt: %v", fb, len(system), spread(ws, got))
			if r := spreadRange(ws, got); r > 1 {
				t.Errorf("%s: %v, want an even spread (33 or 34 each)", fb, spread(ws, got))
			}
		}
	})

	t.Run("cold fleet, mixed prompt lengths", func(t *testing.T) {
		// smallest_tree balances stored tokens, not requests: a worker that
		// took one long prompt gets no more until the others catch up.
		mixed := func(i int) int {
			if i%4 == 0 {
				return 4 * promptLen
			}
			return promptLen / 4
		}
		ws, got := burst(t, policy.FallbackSmallestTree, 40, []int{0, 0, 0, 0}, mixed)
		ws2, got2 := burst(t, policy.FallbackLeastLoaded, 40, []int{0, 0, 0, 0}, mixed)
		if spreadRange(ws, got) <= spreadRange(ws2, got2) {
			t.Errorf("want smallest_tree (%v) less even in requests than least_loaded (%v)", spread(ws, got), spread(ws2, got2))
		}
	})
}

func spread(ws []*workers.Worker, got map[string]int) []int {
	out := make([]int, len(ws))
	for i, w := range ws {
		out[i] = got[w.URL()]
	}
	return out
}

func spreadRange(ws []*workers.Worker, got map[string]int) int {
	s := spread(ws, got)
	return slices.Max(s) - slices.Min(s)
}

func BenchmarkCacheAwareSelect(b *testing.B) {
	for _, n := range []int{4, 64, 256} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			ws := fleet(n)
			p, err := policy.NewCacheAware(policy.DefaultOptions())
			if err != nil {
				b.Fatal(err)
			}
			system := caTokens(1, 1024)
			for i, w := range ws {
				if _, err := p.Select(context.Background(), &policy.Request{InputIDs: caJoin(system, caTokens(i+2, 512))}, workers.Views([]*workers.Worker{w})); err != nil {
					b.Fatal(err)
				}
			}
			req := &policy.Request{InputIDs: caJoin(system, caTokens(3, 512), caTokens(7, 256))}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Select(context.Background(), req, workers.Views(ws)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCacheAwareSelectWhy is BenchmarkCacheAwareSelect with the
// decision's reason read, as a log line written for every request would:
// the cost Decision.Why defers.
func BenchmarkCacheAwareSelectWhy(b *testing.B) {
	ws := fleet(64)
	p, err := policy.NewCacheAware(policy.DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	system := caTokens(1, 1024)
	for i, w := range ws {
		if _, err := p.Select(context.Background(), &policy.Request{InputIDs: caJoin(system, caTokens(i+2, 512))}, workers.Views([]*workers.Worker{w})); err != nil {
			b.Fatal(err)
		}
	}
	req := &policy.Request{InputIDs: caJoin(system, caTokens(3, 512), caTokens(7, 256))}
	b.ReportAllocs()
	for b.Loop() {
		d, err := p.Select(context.Background(), req, workers.Views(ws))
		if err != nil {
			b.Fatal(err)
		}
		if d.Why() == "" {
			b.Fatal("no reason")
		}
	}
}

package tree

import (
	"fmt"
	"github.com/kvgate/kvgate/internal/testutil"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// TestConcurrent runs selections, replies (Extend), confirmations, expiries,
// trims, limits and tenant removals while Evict runs; with -race it checks the locking, and
// afterwards the structure.
func TestConcurrent(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 4, MaxTokens: 4000})
	prefixes := make([][]uint32, 8)
	for i := range prefixes {
		prefixes[i] = testutil.Tokens(uint32(i*1000), 64)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	worker := func(g int, body func(rng *rand.Rand, prompt []uint32)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; i < 2000 && !stop.Load(); i++ {
				prompt := append(slices.Clone(prefixes[rng.IntN(len(prefixes))]), testutil.Tokens(rng.Uint32N(1<<20), rng.IntN(80))...)
				body(rng, prompt)
			}
		}()
	}
	for g := range 4 {
		worker(g, func(rng *rand.Rand, prompt []uint32) {
			m, name := tr.MatchInsert(prompt, func(m Match) string {
				best, name := 0, fmt.Sprint("w", rng.IntN(6))
				for _, tm := range m.Tenants {
					if tm.Tokens > best {
						best, name = tm.Tokens, tm.Tenant
					}
				}
				return name
			})
			switch rng.IntN(4) {
			case 0:
				tr.InsertConfirmed(prompt[:rng.IntN(len(prompt)+1)], name)
			case 1:
				tr.ExpireSpeculative(prompt, name, m.Tick)
			case 2:
				tr.Extend(m.Tick, prompt, testutil.Tokens(rng.Uint32N(1<<20), rng.IntN(40)), name)
			}
		})
	}
	worker(10, func(rng *rand.Rand, prompt []uint32) { tr.Match(prompt) })
	worker(11, func(rng *rand.Rand, prompt []uint32) {
		switch rng.IntN(20) {
		case 0:
			tr.RemoveTenant(fmt.Sprint("w", rng.IntN(6)))
		case 1:
			tr.ClearTenant(fmt.Sprint("w", rng.IntN(6)))
		case 2:
			tr.SetTenantLimit(fmt.Sprint("w", rng.IntN(6)), rng.IntN(2000))
		default:
			tr.Trim(prompt, fmt.Sprint("w", rng.IntN(6)), rng.IntN(len(prompt)+1))
		}
		_ = tr.TenantTokens("w0")
		_ = tr.Stats()
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			tr.Evict()
		}
	}()
	wg.Wait()
	stop.Store(true)
	<-done
	tr.Evict()
	checkInvariants(t, tr)
	if s := tr.Stats(); s.Tokens > 4000 {
		t.Fatalf("%d tokens after Evict, budget 4000", s.Tokens)
	}
}

// TestSweepSurvivesSplitBetweenSlices reproduces a sweep interleaving
// deterministically: after the sweep collected a dead tenant's nodes, another
// writer splits one of them (the new upper half copies the dead holder) and
// then lets go of the path. The sweep must still remove every dead entry,
// leaving no node held by nobody and freeing the id.
func TestSweepSurvivesSplitBetweenSlices(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 2})
	// dead holds p = [0,4) and below it x = [4,12).
	tr.Insert(testutil.Tokens(0, 12), "dead")
	tr.Insert(cat(testutil.Tokens(0, 4), testutil.Tokens(100, 4)), "other") // keeps p shared, x separate
	dead := tr.ids["dead"]
	tr.sweepPause = func() {
		tr.sweepPause = nil
		// live splits x at 8: x's upper half copies dead's holder ...
		tr.Insert(testutil.Tokens(0, 8), "live")
		// ... then live lets go of the whole path again.
		tr.Trim(testutil.Tokens(0, 8), "live", 0)
		tr.Trim(cat(testutil.Tokens(0, 4), testutil.Tokens(100, 4)), "other", 0)
	}
	tr.RemoveTenant("dead")
	checkInvariants(t, tr)
	if s := tr.Stats(); s.Nodes != 0 || s.UniqueTokens != 0 {
		t.Fatalf("after removing every tenant: %+v", s)
	}
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	if !slices.Contains(tr.free, dead) {
		t.Fatalf("dead tenant's id %d not freed: %+v", dead, tr.tenants[dead])
	}
}

// TestBudgetHoldsAfterEveryInsert inserts unique prompts, from one goroutine
// and then from several, and checks after every insert that the stored
// tokens are within the budget: the budget holds at all times, not only
// after the next Evict.
func TestBudgetHoldsAfterEveryInsert(t *testing.T) {
	const budget = 20_000
	for _, goroutines := range []int{1, 4} {
		t.Run(fmt.Sprint(goroutines, " goroutines"), func(t *testing.T) {
			tr := mustNew(t, Config{PageSize: 16, MaxTokens: budget})
			var wg sync.WaitGroup
			var over atomic.Int64
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 300 {
						prompt := testutil.Tokens(uint32(g<<24|i<<12), 2048)
						if i%2 == 0 {
							tr.Insert(prompt, fmt.Sprint("w", g))
						} else {
							tr.MatchInsert(prompt, func(Match) string { return fmt.Sprint("w", i%3) })
						}
						if n := tr.Stats().Tokens; n > budget {
							over.Store(int64(n))
						}
					}
				}()
			}
			wg.Wait()
			if n := over.Load(); n > 0 {
				t.Fatalf("an insert left %d tokens, budget %d", n, budget)
			}
			if s := tr.Stats(); s.Tokens < budget/2 {
				t.Fatalf("tree kept only %d tokens of a %d budget: eviction went too far", s.Tokens, budget)
			}
			checkInvariants(t, tr)
		})
	}
}

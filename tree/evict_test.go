package tree

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestEvictSlicedIsExact checks that Evict, which works in lock slices and
// pops the frontier index (see frontier.go), evicts exactly what one heap
// of the walked frontier popped under one lock evicts, in every order. The
// tree has thousands of candidates (many batches) and deep chains, so
// parents keep joining the frontier with keys anywhere in the order: under
// LFU and priority a joining parent often comes before what is still in the
// heap. With a selection counted as waiting, every slice ends after
// minSlice, so batches are cut short over and over.
func TestEvictSlicedIsExact(t *testing.T) {
	for _, policy := range []string{"lru", "lfu", "fifo", "mru", "filo", "priority"} {
		for _, waiting := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/waiting=%v", policy, waiting), func(t *testing.T) {
				sliced, whole := buildRandom(t, policy), buildRandom(t, policy)
				budget := sliced.Stats().Tokens * 6 / 10
				setBudget(sliced, budget)
				setBudget(whole, budget)
				if waiting {
					sliced.waiting.Add(1)
				}
				cuts := 0
				sliced.onSlice = func(begin bool) {
					if begin {
						cuts++
					}
				}
				got := sliced.Evict()
				sliced.waiting.Store(0)
				want := evictWhole(whole)
				if got != want {
					t.Fatalf("Evict removed %d tokens, one heap under one lock %d", got, want)
				}
				for i := range 6 {
					name := fmt.Sprint("w", i)
					g, w := sortedHoldings(sliced, name), sortedHoldings(whole, name)
					if !slices.EqualFunc(g, w, slices.Equal) {
						t.Fatalf("%s keeps %d paths after Evict, %d after the one-heap eviction", name, len(g), len(w))
					}
				}
				checkInvariants(t, sliced)
				if waiting && cuts < 10 {
					t.Errorf("Evict ran in %d slices: the test meant to cut it into many", cuts)
				}
			})
		}
	}
}

// buildRandom builds the same tree for the same policy every time: paths of
// one-token pages over a 3-token alphabet (so nodes are short and chains
// deep), 6 tenants, priorities, and some confirmed holdings.
func buildRandom(t *testing.T, policy string) *Tree {
	tr := mustNew(t, Config{PageSize: 1, Policy: policy})
	rng := rand.New(rand.NewPCG(7, 7))
	for range 6000 {
		ids := make([]uint32, 4+rng.IntN(12))
		for j := range ids {
			ids[j] = rng.Uint32N(3)
		}
		name := fmt.Sprint("w", rng.IntN(6))
		if rng.IntN(8) == 0 {
			tr.InsertConfirmed(ids[:rng.IntN(len(ids))], name)
		} else {
			tr.InsertPriority(ids, name, rng.Int32N(4))
		}
	}
	return tr
}

// evictWhole is the eviction without slices: one heap of the frontier,
// popped under the write lock until the tree is within budget.
func evictWhole(tr *Tree) (evicted int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	h := &candHeap{order: tr.order, items: tr.frontier(nil)}
	h.heapify()
	for len(h.items) > 0 && tr.over() {
		evicted += tr.evictOne(h, h.pop())
	}
	return evicted
}

func sortedHoldings(tr *Tree, tenant string) [][]uint32 {
	paths := tr.Holdings(tenant, false)
	slices.SortFunc(paths, slices.Compare)
	return paths
}

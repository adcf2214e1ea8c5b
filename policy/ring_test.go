package policy

import (
	"fmt"
	"testing"

	"github.com/kvgate/kvgate/workers"
)

func ringURLs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("grpc://10.0.0.%d:30000", i+1)
	}
	return out
}

// ringOwners maps each of n keys to the URL owning it on r.
func ringOwners(r *ring, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = r.urls[r.owner(keyHash(fmt.Sprintf("session-%d", i)))]
	}
	return out
}

func TestRingSpreadsKeysEvenly(t *testing.T) {
	for _, n := range []int{2, 5, 16} {
		t.Run(fmt.Sprint(n, " workers"), func(t *testing.T) {
			const keys = 50000
			count := map[string]int{}
			for _, u := range ringOwners(newRing(ringURLs(n), ringVnodes), keys) {
				count[u]++
			}
			mean := float64(keys) / float64(n)
			for _, u := range ringURLs(n) {
				if got := float64(count[u]); got < 0.75*mean || got > 1.25*mean {
					t.Errorf("%s owns %d keys, want within 25%% of %.0f (all: %v)", u, count[u], mean, count)
				}
			}
		})
	}
}

func TestRingAddingAWorkerMovesAboutOneShare(t *testing.T) {
	const keys = 10000
	for _, n := range []int{1, 3, 8, 20} {
		t.Run(fmt.Sprintf("%d to %d", n, n+1), func(t *testing.T) {
			all := ringURLs(n + 1)
			before := ringOwners(newRing(all[:n], ringVnodes), keys)
			after := ringOwners(newRing(all, ringVnodes), keys)
			moved := 0
			for i := range before {
				if before[i] != after[i] {
					moved++
					if after[i] != all[n] {
						t.Fatalf("key %d moved from %s to %s, not to the new worker", i, before[i], after[i])
					}
				}
			}
			share := 1 / float64(n+1)
			if f := float64(moved) / keys; f < share/2 || f > 2*share {
				t.Errorf("%.3f of keys moved, want about %.3f (between %.3f and %.3f)", f, share, share/2, 2*share)
			}
		})
	}
}

func TestRingRemovingAWorkerMovesOnlyItsKeys(t *testing.T) {
	const keys = 10000
	all := ringURLs(6)
	gone := all[2]
	rest := append(append([]string{}, all[:2]...), all[3:]...)
	before := ringOwners(newRing(all, ringVnodes), keys)
	after := ringOwners(newRing(rest, ringVnodes), keys)
	for i := range before {
		switch {
		case before[i] == gone && after[i] == gone:
			t.Fatalf("key %d still on removed worker", i)
		case before[i] != gone && before[i] != after[i]:
			t.Fatalf("key %d moved from %s to %s though its worker stayed", i, before[i], after[i])
		}
	}
}

func TestRingDoesNotDependOnURLOrder(t *testing.T) {
	a := ringURLs(4)
	b := []string{a[3], a[1], a[0], a[2]}
	ka, kb := ringOwners(newRing(a, ringVnodes), 2000), ringOwners(newRing(b, ringVnodes), 2000)
	for i := range ka {
		if ka[i] != kb[i] {
			t.Fatalf("key %d: %s with one URL order, %s with another", i, ka[i], kb[i])
		}
	}
}

func TestRingWalkVisitsEachWorkerOnce(t *testing.T) {
	r := newRing(append(ringURLs(5), ringURLs(5)[0]), 20) // a repeated URL counts once
	for k := range 50 {
		seen := map[int]bool{}
		for o := range r.walk(keyHash(fmt.Sprint(k))) {
			if seen[o] {
				t.Fatalf("walk visited worker %d twice", o)
			}
			seen[o] = true
		}
		if len(seen) != 5 {
			t.Fatalf("walk visited %d workers, want 5", len(seen))
		}
	}
	if o := newRing(nil, 20).owner(1); o != -1 {
		t.Fatalf("empty ring owner = %d, want -1", o)
	}
}

func TestRingCacheBuildsOncePerSetAndBindsTheCallersWorkers(t *testing.T) {
	mk := func(u string) workers.View {
		return workers.ViewOf(workers.NewWorker(u, workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, nil, nil))
	}
	us := ringURLs(3)
	a := []workers.View{mk(us[0]), mk(us[1]), mk(us[2])}
	c := newRingCache(ringVnodes)
	v1 := c.view(a)
	v2 := c.view([]workers.View{a[2], a[0], a[1]})
	if v1.r != v2.r {
		t.Fatal("the same set of URLs in another order built a second ring")
	}
	// A worker re-registered under the same URL is a new object: the view
	// must hand out the caller's objects, whose health is current.
	b := []workers.View{a[0], a[1], mk(us[2])}
	v3 := c.view(b)
	if v3.r != v1.r {
		t.Fatal("same URLs, new worker objects: ring rebuilt")
	}
	for _, w := range v3.ws {
		if w == a[2] {
			t.Fatal("view handed out a stale worker object")
		}
	}
	if v4 := c.view(a[:2]); v4.r == v1.r || len(v4.r.urls) != 2 {
		t.Fatal("a smaller set reused the larger set's ring")
	}
}

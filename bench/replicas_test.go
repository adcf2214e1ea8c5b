package bench

import (
	"bytes"
	"context"
	"fmt"
	"github.com/kvgate/kvgate/internal/testutil"
	"math"
	"strings"
	"testing"
	"time"
)

// TestReplicaIndex: the replica is drawn uniformly, and from the seed, the
// stream and the request's index alone.
func TestReplicaIndex(t *testing.T) {
	const draws = 6000
	for _, n := range []int{1, 2, 3, 4, 7} {
		t.Run(fmt.Sprintf("%d replicas", n), func(t *testing.T) {
			counts := make([]int, n)
			same := 0
			for i := range draws {
				stream := i % 50
				k := replicaIndex(1, stream, i/50, n)
				if k < 0 || k >= n {
					t.Fatalf("replicaIndex(1, %d, %d, %d) = %d, out of range", stream, i/50, n, k)
				}
				if again := replicaIndex(1, stream, i/50, n); again != k {
					t.Fatalf("replicaIndex(1, %d, %d, %d) gave %d, then %d", stream, i/50, n, k, again)
				}
				if replicaIndex(2, stream, i/50, n) == k {
					same++
				}
				counts[k]++
			}
			// Binomial: within 5 standard deviations of draws/n.
			want := float64(draws) / float64(n)
			tol := 5 * math.Sqrt(want*(1-1/float64(n)))
			for k, c := range counts {
				if math.Abs(float64(c)-want) > tol {
					t.Errorf("%d replicas: replica %d drawn %d times of %d, want %.0f ± %.0f", n, k, c, draws, want, tol)
				}
			}
			if n > 1 && same == draws {
				t.Errorf("%d replicas: seeds 1 and 2 made the same choices", n)
			}
		})
	}
}

// TestReplicatedFleet drives a workload through two routers in front of the
// same two engines: each router serves some of the requests by its own
// metrics, the predictions of both are summed, and Close leaves nothing
// running.
func TestReplicatedFleet(t *testing.T) {
	wl, err := Generate(tinyConfig(SharedPrefix))
	if err != nil {
		t.Fatal(err)
	}
	sc := SimConfig()
	sc.TimeScale = 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testutil.NoLeaks(t) // checked after Close, when the test ends

	f, err := StartReplicatedTestbed(ctx, "cache_aware", 2, 2, sc)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Addrs) != 2 || f.Addrs[0] == f.Addrs[1] || f.Addr != f.Addrs[0] {
		t.Fatalf("Addr %q, Addrs %q: want two routers, Addr the first", f.Addr, f.Addrs)
	}
	cfg := Config{Workers: 2, Routers: []int{2}, Sim: sc, Concurrency: 1, Seed: 1}
	r, err := runOnce(ctx, cfg, wl, "cache_aware", mustDial(t, f.Addrs), f)
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	perRouter := f.RouterRequests()
	f.Close()

	if r.Routers != 2 || r.Requests != 20 || r.Errors != 0 {
		t.Fatalf("routers %d, %d requests, %d errors; want 2, 20, 0", r.Routers, r.Requests, r.Errors)
	}
	if len(perRouter) != 2 || perRouter[0] == 0 || perRouter[1] == 0 || perRouter[0]+perRouter[1] != 20 {
		t.Errorf("requests per router %v: want both used, 20 in all", perRouter)
	}
	if r.PredictionExact == nil {
		t.Error("cache_aware behind two routers predicted nothing")
	}
	if r.SameWorkerRate != nil {
		t.Errorf("same-worker rate %v for a workload without conversations, want null", *r.SameWorkerRate)
	}
}

// TestRunWithReplicaCounts runs multiturn with one router and with two:
// both runs are reported in order with their replica counts, conversations
// hop between the two routers, and the table names each run's count.
func TestRunWithReplicaCounts(t *testing.T) {
	wl, err := Generate(tinyConfig(Multiturn))
	if err != nil {
		t.Fatal(err)
	}
	sc := SimConfig()
	sc.TimeScale = 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Run(ctx, Config{Policies: []string{"cache_aware"}, Workers: 2, Routers: []int{1, 2}, Sim: sc, Seed: 1, Progress: &progress}, wl)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 {
		t.Fatalf("%d runs, want 2", len(rep.Runs))
	}
	for i, r := range rep.Runs {
		if r.Policy != "cache_aware" || r.Routers != i+1 || r.Requests != 12 || r.Errors != 0 {
			t.Errorf("run %d: %s, %d routers, %d requests, %d errors; want cache_aware, %d, 12, 0", i, r.Policy, r.Routers, r.Requests, r.Errors, i+1)
		}
		// 3 conversations of 4 turns: 9 turns follow another.
		if r.SameWorkerRate == nil || *r.SameWorkerRate < 0 || *r.SameWorkerRate > 1 || math.Mod(*r.SameWorkerRate*9, 1) > 1e-9 {
			t.Errorf("run %d: same-worker rate %v, want a share of 9 turns", i, r.SameWorkerRate)
		}
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"routers", "same worker"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	for _, want := range []string{"cache_aware ×1: 12 requests", "cache_aware ×2: 12 requests"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
	}
}

// TestRunOneRouterByDefault: without Routers, and with Routers {1}, a run is
// labelled and printed as before replicas existed.
func TestRunOneRouterByDefault(t *testing.T) {
	wc := tinyConfig(SharedPrefix)
	wc.Requests = 4
	wl, err := Generate(wc)
	if err != nil {
		t.Fatal(err)
	}
	sc := SimConfig()
	sc.TimeScale = 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, routers := range [][]int{nil, {1}} {
		var progress bytes.Buffer
		rep, err := Run(ctx, Config{Policies: []string{"round_robin"}, Workers: 2, Routers: routers, Sim: sc, Concurrency: 1, Seed: 1, Progress: &progress}, wl)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Runs) != 1 || rep.Runs[0].Routers != 1 {
			t.Fatalf("Routers %v: %d runs, first with %d routers; want 1, 1", routers, len(rep.Runs), rep.Runs[0].Routers)
		}
		if !strings.HasPrefix(progress.String(), "round_robin: 4 requests") {
			t.Errorf("Routers %v: progress %q", routers, progress.String())
		}
		var table bytes.Buffer
		if err := rep.WriteTable(&table); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(table.String(), "routers") || strings.Contains(table.String(), "same worker") {
			t.Errorf("Routers %v: a table of one router shows replica columns:\n%s", routers, table.String())
		}
	}
}

func TestRunRejectsRouterCounts(t *testing.T) {
	wl, err := Generate(tinyConfig(SharedPrefix))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		cfg  Config
	}{
		{"zero", Config{Policies: []string{"round_robin"}, Workers: 2, Routers: []int{1, 0}}},
		{"negative", Config{Policies: []string{"round_robin"}, Workers: 2, Routers: []int{-1}}},
		{"target", Config{Target: "127.0.0.1:1", Routers: []int{2}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(context.Background(), tt.cfg, wl)
			if err == nil || !strings.Contains(err.Error(), "--routers") {
				t.Fatalf("Run: %v, want an error naming --routers", err)
			}
		})
	}
}

// mustDial is a client of the routers at addrs; runOnce closes it.
func mustDial(t *testing.T, addrs []string) front {
	t.Helper()
	fr, err := dialRouters(addrs)
	if err != nil {
		t.Fatal(err)
	}
	return fr
}

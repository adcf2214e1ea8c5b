package policy_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// idsFrom returns n token ids that start with the given prefix id and then
// count up from start.
func idsFrom(prefix uint32, start uint32, n int) []uint32 {
	ids := make([]uint32, n)
	ids[0] = prefix
	for i := 1; i < n; i++ {
		ids[i] = start + uint32(i)
	}
	return ids
}

func mustSelect(t *testing.T, p policy.Policy, req *policy.Request, ws []*workers.Worker) policy.Decision {
	t.Helper()
	d, err := p.Select(context.Background(), req, workers.Views(ws))
	if err != nil {
		t.Fatalf("%s: Select: %v", p.Name(), err)
	}
	return d
}

func TestPrefixHashSamePrefixSameWorker(t *testing.T) {
	ws := fleet(4)
	p := must(policy.NewPrefixHash(policy.DefaultOptions()))
	for prefix := range uint32(20) {
		base := idsFrom(prefix, 1000, 300)
		first := mustSelect(t, p, &policy.Request{InputIDs: base}, ws)
		if first.Branch != "ring" {
			t.Fatalf("idle fleet: branch %q, want ring", first.Branch)
		}
		// Same first 256 tokens, different tails and lengths.
		for _, tail := range []int{0, 10, 500} {
			ids := append(append([]uint32{}, base[:256]...), idsFrom(7, uint32(tail), 1+tail)...)
			if d := mustSelect(t, p, &policy.Request{InputIDs: ids}, ws); d.Worker != first.Worker {
				t.Fatalf("prefix %d: tail %d went to %s, first to %s", prefix, tail, d.Worker, first.Worker)
			}
		}
	}
}

func TestPrefixHashOnlyTheConfiguredPrefixCounts(t *testing.T) {
	ws := fleet(8)
	p := must(policy.NewPrefixHash(opts(func(o *policy.Options) { o.PrefixHash.TokenCount = 4 })))
	a := []uint32{1, 2, 3, 4, 5, 6}
	b := []uint32{1, 2, 3, 4, 9, 9, 9}
	if mustSelect(t, p, &policy.Request{InputIDs: a}, ws).Worker != mustSelect(t, p, &policy.Request{InputIDs: b}, ws).Worker {
		t.Fatal("prompts agreeing on the first 4 tokens went to different workers")
	}
	// Differing within the prefix: over many prompts, more than one worker.
	seen := map[*workers.Worker]bool{}
	for i := range uint32(64) {
		seen[mustSelect(t, p, &policy.Request{InputIDs: []uint32{1, 2, 3, i}}, ws).Worker] = true
	}
	if len(seen) < 4 {
		t.Fatalf("64 different 4-token prefixes reached only %d of 8 workers", len(seen))
	}
}

func TestPrefixHashSpreadsDifferentPrefixes(t *testing.T) {
	ws := fleet(4)
	p := must(policy.NewPrefixHash(policy.DefaultOptions()))
	count := map[string]int{}
	for i := range uint32(2000) {
		count[mustSelect(t, p, &policy.Request{InputIDs: idsFrom(i, 0, 64)}, ws).Worker.URL()]++
	}
	for _, w := range ws {
		if c := count[w.URL()]; c < 300 || c > 700 {
			t.Errorf("%s got %d of 2000 prefixes, want about 500 (all: %v)", w, c, count)
		}
	}
}

func TestPrefixHashOverloadedOwnerSpillsToNextOnRing(t *testing.T) {
	ws := fleet(4)
	req := &policy.Request{InputIDs: idsFrom(42, 0, 100)}
	owner := mustSelect(t, must(policy.NewPrefixHash(policy.DefaultOptions())), req, ws).Worker

	// The limit is max(factor × avg, avg + 1), avg counting this request.
	tests := []struct {
		name       string
		factor     float64
		ownerLoad  int
		othersLoad int
		wantBranch string
	}{
		// avg (4+0+1)/4 = 1.25; limit max(1.56, 2.25): 4 is over.
		{"owner busy, others idle", 1.25, 4, 0, "ring_overflow"},
		// A nearly idle fleet keeps the prefix home: avg 0.5, limit 1.5.
		{"one request on owner", 1.25, 1, 0, "ring"},
		// avg (10+3·8+1)/4 = 8.75; limit 10.9: within the factor.
		{"everyone busy, owner a little more", 1.25, 10, 8, "ring"},
		// avg (20+3·8+1)/4 = 11.25; limit 14.06: 20 is over.
		{"everyone busy, owner far more", 1.25, 20, 8, "ring_overflow"},
		// A larger factor tolerates more: limit 4 × 11.25 = 45.
		{"owner far more, factor 4", 4, 20, 8, "ring"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := must(policy.NewPrefixHash(opts(func(o *policy.Options) { o.PrefixHash.LoadFactor = tc.factor })))
			var release []func()
			for _, w := range ws {
				n := tc.othersLoad
				if w == owner {
					n = tc.ownerLoad
				}
				release = append(release, busy(w, n))
			}
			defer func() {
				for _, r := range release {
					r()
				}
			}()
			d := mustSelect(t, p, req, ws)
			if d.Branch != tc.wantBranch {
				t.Fatalf("branch %q, want %q (%s)", d.Branch, tc.wantBranch, d.Why())
			}
			if (d.Worker == owner) != (tc.wantBranch == "ring") {
				t.Fatalf("chose %s (owner %s): %s", d.Worker, owner, d.Why())
			}
			// The spill goes to a fixed neighbour, not wherever: repeat it.
			if again := mustSelect(t, p, req, ws); again.Worker != d.Worker {
				t.Fatalf("overflow not stable: %s then %s", d.Worker, again.Worker)
			}
		})
	}
}

func TestPrefixHashSkipsUnhealthyOwnerAndReturns(t *testing.T) {
	ws := fleet(3)
	p := must(policy.NewPrefixHash(policy.DefaultOptions()))
	req := &policy.Request{InputIDs: idsFrom(5, 0, 32)}
	owner := mustSelect(t, p, req, ws).Worker
	owner.SetHealthy(false)
	if d := mustSelect(t, p, req, ws); d.Worker == owner {
		t.Fatal("chose the unhealthy owner")
	}
	owner.SetHealthy(true)
	if d := mustSelect(t, p, req, ws); d.Worker != owner {
		t.Fatalf("after recovery chose %s, want owner %s", d.Worker, owner)
	}
}

func ExamplePrefixHash() {
	ws := fleet(3)
	o := policy.DefaultOptions()
	o.PrefixHash.TokenCount = 8 // the system prompt's length
	p := must(policy.NewPrefixHash(o))
	system := []uint32{151644, 8948, 198, 2610, 525, 264, 10950, 17847}
	a, _ := p.Select(context.Background(), &policy.Request{InputIDs: append(system, 1, 2, 3)}, workers.Views(ws))
	b, _ := p.Select(context.Background(), &policy.Request{InputIDs: append(system, 4, 5)}, workers.Views(ws))
	fmt.Println(a.Branch, a.Worker == b.Worker)
	// Output: ring true
}

// BenchmarkRingPolicies measures one selection among 256 workers, the ring
// already built (it is cached per set of worker URLs).
func BenchmarkRingPolicies(b *testing.B) {
	ws := fleet(256)
	ids := idsFrom(1, 0, 8192)
	for _, p := range []policy.Policy{must(policy.NewPrefixHash(policy.DefaultOptions())), policy.NewConsistentHashing(policy.DefaultOptions()),
		must(policy.NewManual(policy.DefaultOptions())), must(policy.NewBucket(policy.DefaultOptions()))} {
		b.Run(p.Name(), func(b *testing.B) {
			req := &policy.Request{InputIDs: ids, RoutingKey: "user-1"}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Select(b.Context(), req, workers.Views(ws)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

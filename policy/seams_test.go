package policy_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// requests are the kinds of request every policy sees: with and without a
// routing key, short and long prompts, shared prefixes.
func requests() []policy.Request {
	var rs []policy.Request
	for i := range 24 {
		ids := make([]uint32, 20+i*60)
		for j := range ids {
			ids[j] = uint32(i%4*1000 + j)
		}
		r := policy.Request{InputIDs: ids}
		if i%2 == 0 {
			r.RoutingKey = fmt.Sprint("session-", i%5)
		}
		rs = append(rs, r)
	}
	return rs
}

// TestExcludeIsUnavailableForThatRequest: for every policy, an excluded
// worker is never chosen, whatever the request, and excluding every healthy
// worker (alone, or with the others unhealthy) is ErrNoHealthyWorker.
func TestExcludeIsUnavailableForThatRequest(t *testing.T) {
	ctx := context.Background()
	for _, name := range policy.Names() {
		t.Run(name, func(t *testing.T) {
			ws := fleet(3)
			p, err := policy.New(name, policy.DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			for _, exclude := range [][]int{{0}, {1}, {0, 2}, {2, 1}} {
				urls := make([]string, len(exclude))
				for i, e := range exclude {
					urls[i] = ws[e].URL()
				}
				for i, r := range requests() {
					r.Exclude = urls
					d, err := p.Select(ctx, &r, workers.Views(ws))
					if err != nil {
						t.Fatalf("request %d excluding %v: %v", i, exclude, err)
					}
					if slices.Contains(urls, d.Worker.URL()) {
						t.Fatalf("request %d went to excluded %s (%s)", i, d.Worker.URL(), d.Why())
					}
				}
			}
			all := []string{ws[0].URL(), ws[1].URL(), ws[2].URL()}
			ws[2].SetHealthy(false)
			for _, exclude := range [][]string{all, all[:2]} {
				for i, r := range requests() {
					r.Exclude = exclude
					if _, err := p.Select(ctx, &r, workers.Views(ws)); !errors.Is(err, policy.ErrNoHealthyWorker) {
						t.Fatalf("request %d excluding %d of 3 (third unhealthy): err = %v, want ErrNoHealthyWorker", i, len(exclude), err)
					}
				}
			}
		})
	}
}

// TestExcludeKeepsRingsAndTargets: exclusion is per request. The ring is not
// rebuilt without the excluded worker (a key's owner is the same for the next
// request), and x-target-worker indices still count every candidate.
func TestExcludeKeepsRingsAndTargets(t *testing.T) {
	ctx := context.Background()
	ws := fleet(4)
	p := policy.NewConsistentHashing(policy.DefaultOptions())
	owner := mustSelect(t, p, &policy.Request{RoutingKey: "k"}, ws).Worker
	d := mustSelect(t, p, &policy.Request{RoutingKey: "k", Exclude: []string{owner.URL()}}, ws)
	if d.Worker == owner || d.Branch != "failover" {
		t.Fatalf("retry went to %s by %s, want another worker by failover", d.Worker.URL(), d.Branch)
	}
	if again := mustSelect(t, p, &policy.Request{RoutingKey: "k"}, ws).Worker; again != owner {
		t.Fatalf("after a retry the key moved from %s to %s", owner.URL(), again.URL())
	}
	if d := mustSelect(t, p, &policy.Request{TargetWorker: "2", Exclude: []string{ws[0].URL()}}, ws); d.Worker != ws[2] {
		t.Fatalf("x-target-worker 2 with worker 0 excluded went to %s", d.Worker.URL())
	}
	_, err := p.Select(ctx, &policy.Request{TargetWorker: "2", Exclude: []string{ws[2].URL()}}, workers.Views(ws))
	if !errors.Is(err, policy.ErrTargetUnavailable) {
		t.Fatalf("excluded target: err = %v, want ErrTargetUnavailable", err)
	}
}

// TestCacheAwareRetryDoesNotCountTwice: a failed attempt's speculative
// insert is trimmed by Observe, and the retry inserts for its own worker, so
// the prompt is counted once, for the worker that served it.
func TestCacheAwareRetryDoesNotCountTwice(t *testing.T) {
	ws := fleet(2)
	p := newCA(t, nil)
	prompt := caTokens(7, 64)
	req := &policy.Request{InputIDs: prompt}
	first := caSelectReq(t, p, req, ws)
	p.Observe(req, first, policy.Outcome{Err: errors.New("worker died")})
	retry := &policy.Request{InputIDs: prompt, Exclude: []string{first.Worker.URL()}}
	second := caSelectReq(t, p, retry, ws)
	if second.Worker == first.Worker {
		t.Fatal("retry went to the excluded worker")
	}
	s := p.TreeStats()
	if s.TenantTokens[first.Worker.URL()] != 0 || s.TenantTokens[second.Worker.URL()] != 64 || s.Tokens != 64 {
		t.Fatalf("after a failed attempt and its retry the tree holds %v, want 64 tokens for %s only", s.TenantTokens, second.Worker.URL())
	}
}

func caSelectReq(t *testing.T, p policy.Policy, req *policy.Request, ws []*workers.Worker) policy.Decision {
	t.Helper()
	d, err := p.Select(context.Background(), req, workers.Views(ws))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestForgetter: the policies that keep per-worker state implement
// Forgetter, and forgetting a worker drops that state; the others keep none.
func TestForgetter(t *testing.T) {
	ctx := context.Background()
	stateful := map[string]func(t *testing.T, p policy.Policy, ws []*workers.Worker){
		"cache_aware": func(t *testing.T, p policy.Policy, ws []*workers.Worker) {
			ca := p.(*policy.CacheAware)
			if ca.TreeStats().TenantTokens[ws[0].URL()] != 0 {
				t.Fatal("worker 0 still in the tree")
			}
		},
		"manual": func(t *testing.T, p policy.Policy, ws []*workers.Worker) {
			m := p.(*policy.Manual)
			if m.Keys() == 0 {
				return // every key was homed on worker 0
			}
			d := mustSelect(t, p, &policy.Request{RoutingKey: "session-0"}, ws[1:])
			if d.Branch != "assigned" && d.Branch != "sticky" {
				t.Fatalf("session-0 after Forget: %s", d.Branch)
			}
		},
		"prefix_hash":        wantNoRingWith,
		"consistent_hashing": wantNoRingWith,
		"vllm_cache_aware": func(t *testing.T, p policy.Policy, ws []*workers.Worker) {
			if _, ok := p.(*policy.VllmCacheAware).IndexStats().BackendBlocks[ws[0].URL()]; ok {
				t.Fatal("worker 0 still in the block index")
			}
		},
	}
	for _, name := range policy.Names() {
		t.Run(name, func(t *testing.T) {
			ws := fleet(3)
			p, err := policy.New(name, policy.DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range requests() {
				if _, err := p.Select(ctx, &r, workers.Views(ws)); err != nil {
					t.Fatal(err)
				}
			}
			f, ok := p.(policy.Forgetter)
			check, want := stateful[name]
			if ok != want {
				t.Fatalf("implements Forgetter: %v, want %v", ok, want)
			}
			if !ok {
				return
			}
			f.Forget(ws[0].URL())
			check(t, p, ws)
		})
	}
}

// wantNoRingWith: after Forget(worker 0) no cached ring includes it (the
// only set seen included it, so none is left).
func wantNoRingWith(t *testing.T, p policy.Policy, _ []*workers.Worker) {
	if n := policy.CachedRings(p); n != 0 {
		t.Fatalf("%d rings cached after forgetting a worker in each", n)
	}
}

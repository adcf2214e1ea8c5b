package policy_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

func TestConsistentHashingKeyPrecedence(t *testing.T) {
	ws := fleet(5)
	p := policy.NewConsistentHashing(opts(func(o *policy.Options) { o.Intn = draws(3) }))
	byKey := func(k string) *workers.Worker {
		return mustSelect(t, p, &policy.Request{RoutingKey: k}, ws).Worker
	}
	tests := []struct {
		name       string
		req        policy.Request
		wantBranch string
		want       *workers.Worker // nil: not checked
	}{
		{"target beats everything", policy.Request{TargetWorker: "2", RoutingKey: "user-1", ImplicitKey: "Bearer x"}, "target", ws[2]},
		{"target with spaces", policy.Request{TargetWorker: " 4 "}, "target", ws[4]},
		{"target by URL", policy.Request{TargetWorker: "grpc://127.0.0.1:9003"}, "target", ws[3]},
		{"target by host:port", policy.Request{TargetWorker: "127.0.0.1:9001", RoutingKey: "user-1"}, "target", ws[1]},
		{"routing key beats implicit key", policy.Request{RoutingKey: "user-1", ImplicitKey: "Bearer x"}, "routing_key", byKey("user-1")},
		{"implicit key hashes like a routing key", policy.Request{ImplicitKey: "user-1"}, "implicit_key", byKey("user-1")},
		{"no key: random", policy.Request{}, "random", ws[3]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := mustSelect(t, p, &tc.req, ws)
			if d.Branch != tc.wantBranch || (tc.want != nil && d.Worker != tc.want) {
				t.Fatalf("chose %s by %q, want %s by %q (%s)", d.Worker, d.Branch, tc.want, tc.wantBranch, d.Why())
			}
		})
	}
}

func TestConsistentHashingTargetErrors(t *testing.T) {
	ws := fleet(3)
	ws[1].SetHealthy(false)
	p := policy.NewConsistentHashing(policy.DefaultOptions())
	tests := []struct {
		target  string
		invalid bool   // also ErrInvalidTarget
		mention string // the message names this
	}{
		{"1", false, "unhealthy"},
		{"3", true, "out of range"},
		{"99", true, "indices 0 to 2"},
		{"-1", true, `"-1"`},
		{"one", true, `x-target-worker "one"`},
		{"grpc://127.0.0.1:1", true, "nor a worker's name"},
	}
	for _, tc := range tests {
		t.Run(tc.target, func(t *testing.T) {
			_, err := p.Select(t.Context(), &policy.Request{TargetWorker: tc.target, RoutingKey: "k"}, workers.Views(ws))
			if !errors.Is(err, policy.ErrTargetUnavailable) {
				t.Fatalf("err = %v, want ErrTargetUnavailable", err)
			}
			if errors.Is(err, policy.ErrInvalidTarget) != tc.invalid {
				t.Fatalf("err = %v: ErrInvalidTarget %v, want %v", err, !tc.invalid, tc.invalid)
			}
			if errors.Is(err, policy.ErrNoHealthyWorker) {
				t.Fatalf("err = %v: a bad target is not a fleet without healthy workers", err)
			}
			if !strings.Contains(err.Error(), tc.mention) || !strings.Contains(err.Error(), "x-target-worker") {
				t.Fatalf("err = %q, want it to name x-target-worker and %q", err, tc.mention)
			}
		})
	}
}

func TestConsistentHashingStableKeys(t *testing.T) {
	ws := fleet(4)
	p := policy.NewConsistentHashing(policy.DefaultOptions())
	first := map[string]*workers.Worker{}
	for round := range 3 {
		for i := range 200 {
			k := fmt.Sprintf("user-%d", i)
			d := mustSelect(t, p, &policy.Request{RoutingKey: k}, ws)
			if round == 0 {
				first[k] = d.Worker
			} else if d.Worker != first[k] {
				t.Fatalf("round %d: %s went to %s, first to %s", round, k, d.Worker, first[k])
			}
		}
	}
	// A fresh policy (a restarted router) agrees: the ring depends on URLs only.
	q := policy.NewConsistentHashing(policy.DefaultOptions())
	for k, w := range first {
		if d := mustSelect(t, q, &policy.Request{RoutingKey: k}, ws); d.Worker != w {
			t.Fatalf("a new policy sent %s to %s, the first to %s", k, d.Worker, w)
		}
	}
}

func TestConsistentHashingFailoverAndRecovery(t *testing.T) {
	ws := fleet(4)
	p := policy.NewConsistentHashing(policy.DefaultOptions())
	home := map[string]*workers.Worker{}
	for i := range 400 {
		k := fmt.Sprintf("session-%d", i)
		home[k] = mustSelect(t, p, &policy.Request{RoutingKey: k}, ws).Worker
	}
	down := ws[1]
	down.SetHealthy(false)
	failover := map[string]*workers.Worker{}
	for k, h := range home {
		d := mustSelect(t, p, &policy.Request{RoutingKey: k}, ws)
		switch {
		case d.Worker == down:
			t.Fatalf("%s sent to the unhealthy worker", k)
		case h != down && (d.Worker != h || d.Branch != "routing_key"):
			t.Fatalf("%s moved from healthy %s to %s (%s) while another worker was down", k, h, d.Worker, d.Branch)
		case h == down && d.Branch != "failover":
			t.Fatalf("%s: branch %q, want failover", k, d.Branch)
		}
		failover[k] = d.Worker
	}
	// Failover is itself consistent: the same key picks the same substitute.
	for k, w := range failover {
		if d := mustSelect(t, p, &policy.Request{RoutingKey: k}, ws); d.Worker != w {
			t.Fatalf("%s failed over to %s, then %s", k, w, d.Worker)
		}
	}
	// Leaving the unhealthy worker out of the candidates gives the same answers.
	rest := []*workers.Worker{ws[0], ws[2], ws[3]}
	for k, w := range failover {
		if d := mustSelect(t, p, &policy.Request{RoutingKey: k}, rest); d.Worker != w {
			t.Fatalf("%s: %s with the unhealthy worker listed, %s without", k, w, d.Worker)
		}
	}
	down.SetHealthy(true)
	for k, h := range home {
		if d := mustSelect(t, p, &policy.Request{RoutingKey: k}, ws); d.Worker != h {
			t.Fatalf("after recovery %s went to %s, want its owner %s", k, d.Worker, h)
		}
	}
}

func TestConsistentHashingAddingAWorkerMovesAboutOneShare(t *testing.T) {
	const keys = 10000
	for _, n := range []int{2, 4, 10} {
		t.Run(fmt.Sprintf("%d to %d", n, n+1), func(t *testing.T) {
			ws := fleet(n + 1)
			p := policy.NewConsistentHashing(policy.DefaultOptions())
			moved := 0
			for i := range keys {
				req := &policy.Request{RoutingKey: fmt.Sprintf("user-%d", i)}
				before := mustSelect(t, p, req, ws[:n]).Worker
				after := mustSelect(t, p, req, ws).Worker
				if before != after {
					moved++
					if after != ws[n] {
						t.Fatalf("%s moved between old workers: %s to %s", req.RoutingKey, before, after)
					}
				}
			}
			share := 1 / float64(n+1)
			if f := float64(moved) / keys; f < share/2 || f > 2*share {
				t.Errorf("%.3f of keys moved, want about %.3f", f, share)
			}
		})
	}
}

func TestConsistentHashingReasonHidesKeys(t *testing.T) {
	ws := fleet(2)
	p := policy.NewConsistentHashing(policy.DefaultOptions())
	for _, req := range []policy.Request{{ImplicitKey: "Bearer sk-secret"}, {RoutingKey: "user-secret"}} {
		if d := mustSelect(t, p, &req, ws); strings.Contains(d.Why(), "secret") {
			t.Fatalf("reason %q reveals the key", d.Why())
		}
	}
}

// The four policies of this file's siblings share these promises.
func newKeyedPolicies() []policy.Policy {
	return []policy.Policy{
		must(policy.NewPrefixHash(policy.DefaultOptions())),
		policy.NewConsistentHashing(policy.DefaultOptions()),
		must(policy.NewManual(policy.DefaultOptions())),
		must(policy.NewBucket(policy.DefaultOptions())),
	}
}

func TestKeyedPoliciesNeverChooseUnhealthyWorkers(t *testing.T) {
	for _, p := range newKeyedPolicies() {
		t.Run(p.Name(), func(t *testing.T) {
			ws := fleet(5)
			for round := range 32 {
				for i, w := range ws {
					w.SetHealthy((round>>i)&1 == 0 || i == round%5)
				}
				for k := range 20 {
					req := &policy.Request{RoutingKey: fmt.Sprint(k), InputIDs: idsFrom(uint32(k), 0, 50*k+1)}
					if d := mustSelect(t, p, req, ws); !d.Worker.Healthy() {
						t.Fatalf("round %d key %d: chose unhealthy %s (%s)", round, k, d.Worker, d.Branch)
					}
				}
			}
			for _, w := range ws {
				w.SetHealthy(false)
			}
			req := &policy.Request{RoutingKey: "k", ImplicitKey: "c", InputIDs: []uint32{1, 2}}
			if _, err := p.Select(t.Context(), req, workers.Views(ws)); !errors.Is(err, policy.ErrNoHealthyWorker) {
				t.Fatalf("all unhealthy: err = %v, want ErrNoHealthyWorker", err)
			}
		})
	}
}

// Run with -race: selection, health changes and background work at once.
func TestKeyedPoliciesConcurrentUse(t *testing.T) {
	for _, p := range newKeyedPolicies() {
		t.Run(p.Name(), func(t *testing.T) {
			ws := fleet(4)
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := range 300 {
						req := &policy.Request{RoutingKey: fmt.Sprint(i % 50), InputIDs: idsFrom(uint32(i%7), 0, 1+i), DryRun: i%5 == 0}
						d, err := p.Select(t.Context(), req, workers.Views(ws))
						if err == nil {
							d.Worker.Acquire()()
						}
						if g == 0 && i%10 == 0 {
							ws[i%4].SetHealthy(i%20 != 0)
						}
						if g == 1 && i%25 == 0 {
							switch q := p.(type) {
							case *policy.Manual:
								q.EvictIdle()
							case *policy.Bucket:
								q.Adjust()
							}
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// A data-parallel rank target is named url@rank, and x-target-worker takes
// that name in any address form.
func TestConsistentHashingTargetsARank(t *testing.T) {
	var ws []*workers.Worker
	for r := range 3 {
		ws = append(ws, workers.NewWorker(workers.RankName("grpc://127.0.0.1:9100", r), workers.ProtocolVLLM,
			workers.RoleRegular, workers.ModelInfo{}, nil, nil))
	}
	p := policy.NewConsistentHashing(policy.DefaultOptions())
	for _, target := range []string{"grpc://127.0.0.1:9100@2", "127.0.0.1:9100@2", "http://127.0.0.1:9100@2", "2"} {
		d, err := p.Select(t.Context(), &policy.Request{TargetWorker: target}, workers.Views(ws))
		if err != nil || d.Worker != ws[2] || d.Branch != "target" {
			t.Errorf("x-target-worker %q: %v by %q, %v; want rank 2", target, d.Worker, d.Branch, err)
		}
	}
	if _, err := p.Select(t.Context(), &policy.Request{TargetWorker: "grpc://127.0.0.1:9100@3"}, workers.Views(ws)); !errors.Is(err, policy.ErrInvalidTarget) {
		t.Errorf("a rank the engine does not have: %v", err)
	}
}

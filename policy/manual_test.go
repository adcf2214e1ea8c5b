package policy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

func TestManualKeysStayWhenWorkersAreAdded(t *testing.T) {
	all := fleet(6)
	p := must(policy.NewManual(policy.DefaultOptions()))
	home := map[string]*workers.Worker{}
	for i := range 100 {
		k := fmt.Sprintf("chat-%d", i)
		d := mustSelect(t, p, &policy.Request{RoutingKey: k}, all[:2])
		if d.Branch != "assigned" {
			t.Fatalf("new key %s: branch %q, want assigned", k, d.Branch)
		}
		home[k] = d.Worker
	}
	for n := 3; n <= len(all); n++ {
		for k, w := range home {
			if d := mustSelect(t, p, &policy.Request{RoutingKey: k}, all[:n]); d.Worker != w || d.Branch != "sticky" {
				t.Fatalf("with %d workers %s went to %s by %q, want %s by sticky", n, k, d.Worker, d.Branch, w)
			}
		}
	}
	if p.Keys() != 100 {
		t.Fatalf("Keys() = %d, want 100", p.Keys())
	}
}

func TestManualAssignmentModes(t *testing.T) {
	tests := []struct {
		name  string
		mode  string
		loads []int
		keyed map[int]int // worker → keys already assigned to it
		draws []int
		want  int
	}{
		{"random uses the random source", "random", []int{0, 0, 0}, nil, []int{2}, 2},
		{"min_load takes the least loaded", "min_load", []int{3, 1, 2}, nil, []int{0}, 1},
		{"min_load draws among equals", "min_load", []int{3, 1, 1}, nil, []int{1}, 2},
		{"min_group takes the fewest keys", "min_group", []int{0, 0, 9}, map[int]int{0: 2, 1: 1}, []int{0}, 2},
		{"min_group ignores load", "min_group", []int{0, 5, 0}, map[int]int{0: 1, 2: 1}, []int{0}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := fleet(len(tc.loads))
			// Give workers their keys first, each through a one-worker fleet.
			p := must(policy.NewManual(opts(func(o *policy.Options) { o.Manual.AssignmentMode = tc.mode; o.Intn = draws(tc.draws...) })))
			for w, n := range tc.keyed {
				for i := range n {
					mustSelect(t, p, &policy.Request{RoutingKey: fmt.Sprintf("old-%d-%d", w, i)}, ws[w:w+1])
				}
			}
			for i, l := range tc.loads {
				defer busy(ws[i], l)()
			}
			d := mustSelect(t, p, &policy.Request{RoutingKey: "new"}, ws)
			if d.Worker != ws[tc.want] || d.Branch != "assigned" {
				t.Fatalf("chose %s by %q, want %s (%s)", d.Worker, d.Branch, ws[tc.want], d.Why())
			}
		})
	}
}

func TestManualMinGroupSpreadsKeysEvenly(t *testing.T) {
	ws := fleet(3)
	p := must(policy.NewManual(opts(func(o *policy.Options) { o.Manual.AssignmentMode = "min_group" })))
	count := map[*workers.Worker]int{}
	for i := range 30 {
		count[mustSelect(t, p, &policy.Request{RoutingKey: fmt.Sprint(i)}, ws).Worker]++
	}
	for _, w := range ws {
		if count[w] != 10 {
			t.Fatalf("min_group gave %v keys, want 10 each", count)
		}
	}
}

func TestManualFailoverToBackupAndBack(t *testing.T) {
	ws := fleet(3)
	p := must(policy.NewManual(opts(func(o *policy.Options) { o.Intn = draws(0, 1, 0) })))
	req := &policy.Request{RoutingKey: "chat"}
	steps := []struct {
		name       string
		healthy    []bool
		want       int
		wantBranch string
	}{
		{"assigned home", []bool{true, true, true}, 0, "assigned"},
		{"home down: a backup is chosen", []bool{false, true, true}, 2, "failover"}, // draw 1 of the 2 healthy
		{"backup kept while home is down", []bool{false, true, true}, 2, "failover"},
		{"home back", []bool{true, true, true}, 0, "sticky"},
		{"home down again: same backup", []bool{false, true, true}, 2, "failover"},
		{"home and backup down: new backup", []bool{false, true, false}, 1, "failover"},
		{"backup back, but the new one is kept", []bool{false, true, true}, 1, "failover"},
		{"home back at last", []bool{true, true, true}, 0, "sticky"},
	}
	for _, s := range steps {
		for i, h := range s.healthy {
			ws[i].SetHealthy(h)
		}
		d := mustSelect(t, p, req, ws)
		if d.Worker != ws[s.want] || d.Branch != s.wantBranch {
			t.Fatalf("%s: chose %s by %q, want %s by %q (%s)", s.name, d.Worker, d.Branch, ws[s.want], s.wantBranch, d.Why())
		}
	}
}

func TestManualIdleKeysExpire(t *testing.T) {
	ws := fleet(4)
	c := testutil.NewClock(time.Unix(1_700_000_000, 0))
	p := must(policy.NewManual(opts(func(o *policy.Options) { o.Manual.MaxIdle = time.Hour; o.Now = c.Now; o.Intn = draws(0, 1, 2, 3) })))
	for _, k := range []string{"a", "b", "c"} {
		mustSelect(t, p, &policy.Request{RoutingKey: k}, ws)
		c.Advance(10 * time.Minute)
	}
	// a, b, c last used at 0, 10 and 20 minutes; at 30 minutes a again.
	mustSelect(t, p, &policy.Request{RoutingKey: "a"}, ws)
	// At 75 minutes only b has been idle for over an hour (c 55, a 45).
	c.Advance(45 * time.Minute)
	if n := p.EvictIdle(); n != 1 || p.Keys() != 2 {
		t.Fatalf("evicted %d, %d left; want 1 (b), 2 left", n, p.Keys())
	}
	c.Advance(time.Hour)
	if n := p.EvictIdle(); n != 2 || p.Keys() != 0 {
		t.Fatalf("evicted %d, %d left; want 2, 0 left", n, p.Keys())
	}
	// An evicted key is new again.
	if d := mustSelect(t, p, &policy.Request{RoutingKey: "b"}, ws); d.Branch != "assigned" {
		t.Fatalf("evicted key: branch %q, want assigned", d.Branch)
	}
}

func TestManualEvictsManyKeys(t *testing.T) {
	ws := fleet(2)
	c := testutil.NewClock(time.Unix(0, 0))
	p := must(policy.NewManual(opts(func(o *policy.Options) {
		o.Manual.MaxIdle = time.Minute
		o.Now = c.Now
		o.Manual.AssignmentMode = "min_group"
	})))
	for i := range 5000 {
		mustSelect(t, p, &policy.Request{RoutingKey: fmt.Sprint(i)}, ws)
	}
	c.Advance(2 * time.Minute)
	mustSelect(t, p, &policy.Request{RoutingKey: "7"}, ws) // still in use
	if n := p.EvictIdle(); n != 4999 || p.Keys() != 1 {
		t.Fatalf("evicted %d, %d left; want 4999, 1", n, p.Keys())
	}
	// Group counts were released with the keys: min_group balances afresh.
	count := map[*workers.Worker]int{}
	for i := range 10 {
		count[mustSelect(t, p, &policy.Request{RoutingKey: fmt.Sprint("new-", i)}, ws).Worker]++
	}
	if count[ws[0]] < 4 || count[ws[1]] < 4 {
		t.Fatalf("after eviction min_group split 10 new keys %v", count)
	}
}

func TestManualDryRunChangesNothing(t *testing.T) {
	ws := fleet(3)
	c := testutil.NewClock(time.Unix(0, 0))
	p := must(policy.NewManual(opts(func(o *policy.Options) { o.Manual.MaxIdle = time.Minute; o.Now = c.Now; o.Intn = draws(0, 1, 2) })))
	d := mustSelect(t, p, &policy.Request{RoutingKey: "k", DryRun: true}, ws)
	if d.Branch != "assigned" || p.Keys() != 0 {
		t.Fatalf("dry run: branch %q, %d keys; want assigned and no key kept", d.Branch, p.Keys())
	}
	home := mustSelect(t, p, &policy.Request{RoutingKey: "k"}, ws).Worker
	c.Advance(50 * time.Second)
	mustSelect(t, p, &policy.Request{RoutingKey: "k", DryRun: true}, ws) // does not refresh
	home.SetHealthy(false)
	mustSelect(t, p, &policy.Request{RoutingKey: "k", DryRun: true}, ws) // does not pick a backup
	home.SetHealthy(true)
	c.Advance(20 * time.Second)
	if n := p.EvictIdle(); n != 1 {
		t.Fatalf("a dry run refreshed the key: evicted %d, want 1", n)
	}
}

func TestManualNoKeyIsRandom(t *testing.T) {
	ws := fleet(3)
	p := must(policy.NewManual(opts(func(o *policy.Options) { o.Manual.AssignmentMode = "min_group"; o.Intn = draws(2) })))
	if d := mustSelect(t, p, &policy.Request{}, ws); d.Worker != ws[2] || d.Branch != "random" || p.Keys() != 0 {
		t.Fatalf("chose %s by %q with %d keys kept, want %s by random, none kept", d.Worker, d.Branch, p.Keys(), ws[2])
	}
}

func TestCheckAssignmentMode(t *testing.T) {
	for _, m := range []string{"random", "min_load", "min_group"} {
		if err := policy.CheckAssignmentMode(m); err != nil {
			t.Errorf("%q: %v", m, err)
		}
	}
	for _, m := range []string{"delegate", ""} { // empty is not "the default"
		if err := policy.CheckAssignmentMode(m); err == nil {
			t.Errorf("%q accepted", m)
		}
	}
}

func TestManualRunStopsWithContext(t *testing.T) {
	p := must(policy.NewManual(opts(func(o *policy.Options) { o.Manual.EvictionInterval = time.Millisecond })))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	cancel()
	<-done
}

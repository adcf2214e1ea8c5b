package policy_test

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestManualRetainsNoKeyBytes: 10,000 distinct 1 MiB routing keys (10 GiB
// of keys) leave manual holding one small entry each, not the keys.
func TestManualRetainsNoKeyBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("hashes 10 GiB of keys")
	}
	const keys, keyLen = 10_000, 1 << 20
	ws := fleet(3)
	p := must(policy.NewManual(policy.DefaultOptions()))
	before := testutil.LiveHeap()
	buf := make([]byte, keyLen)
	for i := range keys {
		binary.LittleEndian.PutUint64(buf, uint64(i))
		// A fresh string per key, as a request's metadata would be.
		mustSelect(t, p, &policy.Request{RoutingKey: string(buf)}, ws)
	}
	after := testutil.LiveHeap()
	if n := p.Keys(); n != keys {
		t.Fatalf("%d keys pinned, want %d", n, keys)
	}
	grown := after - before
	if limit := int64(keys * 512); grown > limit { // ~130 B an entry, with room to spare
		t.Fatalf("heap grew %d bytes for %d keys of %d bytes (%d B/key), want under %d",
			grown, keys, keyLen, grown/keys, limit)
	}
	runtime.KeepAlive(p)
}

// TestManualKeyCap: at MaxKeys, a new key evicts the least recently used
// one, so the map never exceeds the cap, and a key in use stays pinned.
func TestManualKeyCap(t *testing.T) {
	ws := fleet(3)
	p := must(policy.NewManual(opts(func(o *policy.Options) { o.Manual.MaxKeys = 100; o.Manual.AssignmentMode = "min_group" })))
	home := mustSelect(t, p, &policy.Request{RoutingKey: "kept"}, ws).Worker
	for i := range 1000 {
		mustSelect(t, p, &policy.Request{RoutingKey: fmt.Sprint("k", i)}, ws)
		mustSelect(t, p, &policy.Request{RoutingKey: "kept"}, ws) // keeps it fresh
		if n := p.Keys(); n > 100 {
			t.Fatalf("%d keys after key %d, cap 100", n, i)
		}
	}
	if d := mustSelect(t, p, &policy.Request{RoutingKey: "kept"}, ws); d.Worker != home || d.Branch != "sticky" {
		t.Fatalf("recently used key went to %s by %s, want its home %s", d.Worker.URL(), d.Branch, home.URL())
	}
	if d := mustSelect(t, p, &policy.Request{RoutingKey: "k0"}, ws); d.Branch != "assigned" {
		t.Fatalf("the oldest key was still pinned (%s)", d.Branch)
	}
}

// TestManualForget: forgetting a removed worker drops the keys homed there
// (placed afresh next time) and the backups pointing at it.
func TestManualForget(t *testing.T) {
	ws := fleet(3)
	p := must(policy.NewManual(opts(func(o *policy.Options) { o.Intn = draws(0, 1, 0, 1) })))
	sel := func(key string, ws ...*workers.Worker) policy.Decision {
		return mustSelect(t, p, &policy.Request{RoutingKey: key}, ws)
	}
	if sel("a", ws...).Worker != ws[0] || sel("b", ws...).Worker != ws[1] {
		t.Fatal("setup: a homed on worker 0, b on worker 1")
	}
	ws[1].SetHealthy(false)
	if d := sel("b", ws...); d.Worker != ws[0] || d.Branch != "failover" { // draws 0 of ws 0, 2
		t.Fatalf("setup: b failed over to %s, want worker 0 as backup", d.Worker.URL())
	}
	if d := sel("b", ws...); !strings.HasSuffix(d.Why(), "unhealthy, backup") {
		t.Fatalf("setup: b has no backup: %s", d.Why())
	}

	p.Forget(ws[0].URL())
	if n := p.Keys(); n != 1 {
		t.Fatalf("%d keys after forgetting worker 0, want 1 (b)", n)
	}
	rest := ws[1:] // worker 0 has left the fleet
	if d := sel("b", rest...); !strings.Contains(d.Why(), "new backup") {
		t.Fatalf("b still had the forgotten backup: %s", d.Why())
	}
	ws[1].SetHealthy(true)
	if d := sel("b", rest...); d.Worker != ws[1] || d.Branch != "sticky" {
		t.Fatalf("b left its home: %s by %s", d.Worker.URL(), d.Branch)
	}
	if d := sel("a", rest...); d.Branch != "assigned" {
		t.Fatalf("a, homed on the forgotten worker, was not placed afresh: %s", d.Branch)
	}
}

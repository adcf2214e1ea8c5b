package policy_test

import (
	"context"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/tree"
	"github.com/kvgate/kvgate/workers"
)

// TestLookupIsTheSelectionsMatchAndChangesNothing: Lookup reports each
// worker's whole-page match as a selection sees it, and leaves the tree as
// it was.
func TestLookupIsTheSelectionsMatchAndChangesNothing(t *testing.T) {
	p, err := policy.NewCacheAware(policy.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	ws := fleet(2)
	views := workers.Views(ws)
	shared := caTokens(1, 64) // 4 pages of 16
	d, err := p.Select(context.Background(), &policy.Request{InputIDs: caJoin(shared, caTokens(2, 20))}, views)
	if err != nil {
		t.Fatal(err)
	}
	owner := d.Worker.URL()
	other := ws[0].URL()
	if other == owner {
		other = ws[1].URL()
	}
	before := p.TreeStats()
	cases := []struct {
		name          string
		ids           []uint32
		owner, others int
	}{
		{"the prompt selected: its whole pages", caJoin(shared, caTokens(2, 20)), 80, 0},
		{"a prompt sharing its first pages", caJoin(shared, caTokens(3, 40)), 64, 0},
		{"less than a page of it", shared[:15], 0, 0},
		{"an unrelated prompt", caTokens(4, 64), 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := p.Lookup(nil, c.ids)
			if got := m.Of(owner); got != c.owner {
				t.Errorf("Lookup: %s holds %d tokens, want %d", owner, got, c.owner)
			}
			if got := m.Of(other); got != c.others {
				t.Errorf("Lookup: %s holds %d tokens, want %d", other, got, c.others)
			}
			dry, err := p.Select(context.Background(), &policy.Request{InputIDs: c.ids, DryRun: true}, views)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := m.Of(owner), dry.Matched.Of(owner); got != want {
				t.Errorf("Lookup says %d tokens, a dry-run selection %d", got, want)
			}
			// A caller's buffer holds the same answer, in its own array:
			// the router's queue matches its waiting requests through one.
			buf := make([]tree.TenantMatch, 1, 4)
			again := p.Lookup(buf, c.ids)
			if !slices.Equal(again.Tenants, m.Tenants) || again.Input != m.Input {
				t.Errorf("Lookup into a buffer = %+v, without one %+v", again, m)
			}
			if len(again.Tenants) > 0 && &again.Tenants[0] != &buf[0] {
				t.Errorf("Lookup into a buffer with room for %d allocated for %d", cap(buf), len(again.Tenants))
			}
		})
	}
	if after := p.TreeStats(); after.Nodes != before.Nodes || after.Tokens != before.Tokens {
		t.Errorf("Lookup changed the tree: %d nodes, %d tokens before; %d, %d after",
			before.Nodes, before.Tokens, after.Nodes, after.Tokens)
	}
}

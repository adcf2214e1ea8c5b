package tree

import (
	"github.com/kvgate/kvgate/internal/testutil"
	"slices"
	"testing"
)

// amongWant is what Match says of prompt for each of names: tokens and
// confirmed tokens by position.
func amongWant(tr *Tree, prompt []uint32, names []string) (tokens, confirmed []int) {
	m := tr.Match(prompt)
	tokens, confirmed = make([]int, len(names)), make([]int, len(names))
	for i, name := range names {
		for _, tm := range m.Tenants {
			if tm.Tenant == name {
				tokens[i], confirmed[i] = tm.Tokens, tm.Confirmed
			}
		}
	}
	return tokens, confirmed
}

// TestMatchInsertAmongAgreesWithMatch: a roster's matches by position are
// Match's by name, through inserts, confirmations, a tenant removed and
// another taking its freed id, and names the tree has never seen; tenants
// outside the roster are left out.
func TestMatchInsertAmongAgreesWithMatch(t *testing.T) {
	const ps = 4
	tr := mustNew(t, Config{PageSize: ps})
	names := []string{"a", "b", "never", "d"} // "c" holds pages but is not in the roster
	r := NewRoster(names)
	shared, x, y := testutil.Tokens(1, 8), testutil.Tokens(100, 8), testutil.Tokens(200, 12)
	prompts := [][]uint32{cat(shared, x), cat(shared, y), testutil.Tokens(900, 3)}
	steps := []struct {
		name string
		do   func()
	}{
		{"empty tree", func() {}},
		{"a and c hold shared+x", func() { tr.Insert(cat(shared, x), "a"); tr.Insert(cat(shared, x), "c") }},
		{"b holds shared", func() { tr.Insert(shared, "b") }},
		{"d confirms shared+y", func() { tr.InsertConfirmed(cat(shared, y), "d") }},
		{"a removed", func() { tr.RemoveTenant("a") }},
		{"e reuses a's id", func() { tr.Insert(cat(shared, y), "e") }},
		{"a back", func() { tr.Insert(shared, "a") }},
		{"d cleared", func() { tr.ClearTenant("d") }},
	}
	for _, st := range steps {
		st.do()
		for _, p := range prompts {
			wantTokens, wantConfirmed := amongWant(tr, p, names)
			tokens := make([]int, len(names))
			confirmed, tick := tr.MatchInsertAmong(p, r, tokens, func() int { return -1 })
			if tick != 0 {
				t.Errorf("%s: nothing chosen, tick %d", st.name, tick)
			}
			if !slices.Equal(tokens, wantTokens) {
				t.Errorf("%s: prompt %v: tokens %v, Match says %v", st.name, p[:3], tokens, wantTokens)
			}
			if confirmed == nil {
				confirmed = make([]int, len(names))
				if slices.ContainsFunc(wantConfirmed, func(n int) bool { return n > 0 }) {
					t.Errorf("%s: confirmed nil, Match says %v", st.name, wantConfirmed)
				}
			}
			if !slices.Equal(confirmed, wantConfirmed) {
				t.Errorf("%s: prompt %v: confirmed %v, Match says %v", st.name, p[:3], confirmed, wantConfirmed)
			}
		}
	}
}

// TestMatchInsertAmongInsertsForChosen: the chosen position's tenant gets
// the prompt, speculatively, with the tick to expire it by, as MatchInsert
// does for a name.
func TestMatchInsertAmongInsertsForChosen(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 4})
	r := NewRoster([]string{"a", "b"})
	prompt := testutil.Tokens(1, 10)
	tokens := make([]int, 2)
	_, tick := tr.MatchInsertAmong(prompt, r, tokens, func() int { return 1 })
	if tick == 0 {
		t.Fatal("insert reported no tick")
	}
	_, _ = tr.MatchInsertAmong(prompt, r, tokens, func() int { return -1 })
	if !slices.Equal(tokens, []int{0, 8}) {
		t.Fatalf("after choosing b: tokens %v, want b holding the 8 whole-page tokens", tokens)
	}
	if n := tr.ExpireSpeculative(prompt, "b", tick); n == 0 {
		t.Fatal("the insert did not expire by its tick")
	}
	if got := tr.TenantTokens("b"); got != 0 {
		t.Fatalf("after expiry b holds %d tokens", got)
	}
}

// TestTenantTokensAmong: by position, what TenantTokens says, for the
// positions asked for only, through a removal and a new tenant.
func TestTenantTokensAmong(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 4})
	names := []string{"a", "b", "never"}
	r := NewRoster(names)
	check := func(step string) {
		t.Helper()
		dst := []int{-1, -1, -1}
		tr.TenantTokensAmong(r, dst, func(i int) bool { return i != 1 })
		want := []int{tr.TenantTokens("a"), -1, tr.TenantTokens("never")}
		if !slices.Equal(dst, want) {
			t.Errorf("%s: %v, want %v (b not asked for)", step, dst, want)
		}
		dst = make([]int, 3)
		tr.TenantTokensAmong(r, dst, func(int) bool { return true })
		for i, name := range names {
			if dst[i] != tr.TenantTokens(name) {
				t.Errorf("%s: %s: %d, TenantTokens says %d", step, name, dst[i], tr.TenantTokens(name))
			}
		}
	}
	check("empty")
	tr.Insert(testutil.Tokens(1, 12), "a")
	tr.Insert(testutil.Tokens(1, 8), "b")
	check("a and b")
	tr.RemoveTenant("a")
	tr.Insert(testutil.Tokens(50, 16), "c") // may take a's id
	check("a removed, c added")
	tr.Insert(testutil.Tokens(1, 4), "a")
	check("a back")
}

package tree

import (
	"fmt"
	"github.com/kvgate/kvgate/internal/testutil"
	"slices"
	"testing"
)

// op is one step of a history the tests below replay: a speculative insert
// (Insert), a confirmed one (InsertConfirmed), or a MatchInsert choosing
// tenant. Each returns the tick it inserted at.
type op struct {
	kind   string // "spec", "conf" or "match"
	tenant string
	ids    []uint32
}

func (o op) apply(t *testing.T, tr *Tree) uint64 {
	t.Helper()
	switch o.kind {
	case "spec":
		tr.Insert(o.ids, o.tenant)
	case "conf":
		tr.InsertConfirmed(o.ids, o.tenant)
	case "match":
		m, _ := tr.MatchInsert(o.ids, func(Match) string { return o.tenant })
		return m.Tick
	default:
		t.Fatalf("unknown op %q", o.kind)
	}
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	return tr.clock
}

// reachOf returns tenant's (tokens, confirmed) in m.
func reachOf(m Match, tenant string) [2]int {
	for _, tm := range m.Tenants {
		if tm.Tenant == tenant {
			return [2]int{tm.Tokens, tm.Confirmed}
		}
	}
	return [2]int{}
}

// TestConfirmedSpec pins how speculative and confirmed inserts combine: each
// case replays a history (page size 4) and matches the 12-token prompt.
func TestConfirmedSpec(t *testing.T) {
	p := testutil.Tokens(0, 12)
	cases := []struct {
		name    string
		history []op
		want    map[string][2]int // tenant: {Tokens, Confirmed}
	}{
		{"a routing decision is speculative", []op{{"match", "a", p}}, map[string][2]int{"a": {12, 0}}},
		{"Insert is speculative", []op{{"spec", "a", p[:8]}}, map[string][2]int{"a": {8, 0}}},
		{"an event confirms the whole path", []op{{"conf", "a", p}}, map[string][2]int{"a": {12, 12}}},
		{"a speculative extension of a confirmed prefix", []op{{"conf", "a", p[:4]}, {"match", "a", p}}, map[string][2]int{"a": {12, 4}}},
		{"touching a confirmed holding keeps it confirmed", []op{{"conf", "a", p}, {"spec", "a", p}, {"match", "a", p[:8]}}, map[string][2]int{"a": {12, 12}}},
		{"confirming a prefix splits the speculative node", []op{{"match", "a", p}, {"conf", "a", p[:8]}}, map[string][2]int{"a": {12, 8}}},
		{"confirming a longer path confirms its ancestors", []op{{"spec", "a", p[:4]}, {"spec", "a", p[:8]}, {"conf", "a", p}}, map[string][2]int{"a": {12, 12}}},
		{"each tenant has its own state", []op{{"conf", "a", p[:8]}, {"match", "b", p}, {"conf", "c", p[:4]}, {"spec", "c", p}},
			map[string][2]int{"a": {8, 8}, "b": {12, 0}, "c": {12, 4}}},
		{"an event below a speculative branch confirms only its path",
			[]op{{"spec", "a", p}, {"conf", "a", cat(p[:4], testutil.Tokens(50, 4))}}, map[string][2]int{"a": {12, 4}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := mustNew(t, Config{PageSize: 4})
			for _, o := range c.history {
				o.apply(t, tr)
			}
			m := tr.Match(p)
			if len(m.Tenants) != len(c.want) {
				t.Errorf("Match = %+v, want %v", m.Tenants, c.want)
			}
			for tn, want := range c.want {
				if got := reachOf(m, tn); got != want {
					t.Errorf("%s: {Tokens, Confirmed} = %v, want %v", tn, got, want)
				}
			}
			s := tr.Stats()
			for tn := range s.TenantTokens {
				if pages := len(tr.Holdings(tn, true)); s.TenantConfirmed[tn] != 4*pages {
					t.Errorf("Stats.TenantConfirmed[%s] = %d, but it holds %d pages confirmed", tn, s.TenantConfirmed[tn], pages)
				}
			}
			checkInvariants(t, tr)
		})
	}
}

func TestMatchInsertReportsTick(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 2})
	var ticks []uint64
	for _, tenant := range []string{"a", "", "b", "a"} {
		var seen uint64 = 1
		m, _ := tr.MatchInsert(testutil.Tokens(0, 4), func(m Match) string { seen = m.Tick; return tenant })
		if seen != 0 {
			t.Fatalf("choose saw Tick %d, want 0", seen)
		}
		ticks = append(ticks, m.Tick)
	}
	if m, _ := tr.MatchInsert(testutil.Tokens(0, 1), func(Match) string { return "a" }); m.Tick != 0 {
		t.Fatalf("a prompt shorter than a page inserted at tick %d", m.Tick)
	}
	if want := []uint64{1, 0, 2, 3}; !slices.Equal(ticks, want) {
		t.Fatalf("ticks %v, want %v (0 where nothing was inserted)", ticks, want)
	}
	if m := tr.Match(testutil.Tokens(0, 4)); m.Tick != 0 {
		t.Fatalf("Match reported Tick %d", m.Tick)
	}
}

// TestInsertSpeculativeReportsTick: InsertSpeculative's tick is the one
// MatchInsert would report for the same insert (0 where nothing is
// inserted), and expiring by it undoes the insert.
func TestInsertSpeculativeReportsTick(t *testing.T) {
	viaMatch, direct := mustNew(t, Config{PageSize: 2}), mustNew(t, Config{PageSize: 2})
	for _, tc := range []struct {
		ids    []uint32
		tenant string
	}{
		{testutil.Tokens(0, 4), "a"}, {testutil.Tokens(0, 4), ""}, {testutil.Tokens(0, 1), "a"}, {testutil.Tokens(0, 6), "b"}, {testutil.Tokens(10, 4), "a"},
	} {
		m, _ := viaMatch.MatchInsert(tc.ids, func(Match) string { return tc.tenant })
		if got := direct.InsertSpeculative(tc.ids, tc.tenant); got != m.Tick {
			t.Errorf("InsertSpeculative(%v, %q) = tick %d, MatchInsert's %d", tc.ids, tc.tenant, got, m.Tick)
		}
	}
	if !slices.Equal(held(direct), held(viaMatch)) {
		t.Fatalf("holdings differ: %v, MatchInsert's %v", held(direct), held(viaMatch))
	}
	tick := direct.InsertSpeculative(testutil.Tokens(20, 4), "c")
	if n := direct.ExpireSpeculative(testutil.Tokens(20, 4), "c", tick); n != 4 || direct.TenantTokens("c") != 0 {
		t.Fatalf("expiring by the returned tick: %d tokens, c still holds %d", n, direct.TenantTokens("c"))
	}
}

// TestExpireSpeculative replays a history under every eviction order (FIFO
// and FILO keep the last access elsewhere), expires decision number expire
// (an index into the history's ticks) along ids, and checks what went and
// what stayed of the 12-token prompt p.
func TestExpireSpeculative(t *testing.T) {
	p := testutil.Tokens(0, 12)
	cases := []struct {
		name    string
		history []op
		tenant  string
		ids     []uint32
		expire  int // index of the decision in history; -1 for tick 0
		want    int
		after   map[string][2]int // Match(p): tenant: {Tokens, Confirmed}
	}{
		{"a decision expires", []op{{"match", "a", p}}, "a", p, 0, 12, map[string][2]int{}},
		{"a later decision on the same path keeps it", []op{{"match", "a", p}, {"match", "a", p}}, "a", p, 0, 0, map[string][2]int{"a": {12, 0}}},
		{"the later decision expires it", []op{{"match", "a", p}, {"match", "a", p}}, "a", p, 1, 12, map[string][2]int{}},
		{"a later shorter decision keeps its prefix", []op{{"match", "a", p}, {"match", "a", p[:4]}}, "a", p, 0, 8, map[string][2]int{"a": {4, 0}}},
		{"what lies below goes too: nothing there is newer", []op{{"match", "a", p}, {"match", "a", p[:4]}}, "a", p[:8], 0, 8, map[string][2]int{"a": {4, 0}}},
		{"confirmed holdings never expire", []op{{"match", "a", p}, {"conf", "a", p}}, "a", p, 1, 0, map[string][2]int{"a": {12, 12}}},
		{"a confirmed prefix stays", []op{{"conf", "a", p[:4]}, {"match", "a", p}}, "a", p, 1, 8, map[string][2]int{"a": {4, 4}}},
		{"an event confirming part of the decision keeps that part", []op{{"match", "a", p}, {"conf", "a", p[:8]}}, "a", p, 0, 4, map[string][2]int{"a": {8, 8}}},
		{"tick 0 expires nothing", []op{{"match", "a", p}}, "a", p, -1, 0, map[string][2]int{"a": {12, 0}}},
		{"another tenant's holdings stay", []op{{"match", "a", p}, {"match", "b", p}}, "a", p, 1, 12, map[string][2]int{"b": {12, 0}}},
		{"an unknown tenant expires nothing", []op{{"match", "a", p}}, "z", p, 0, 0, map[string][2]int{"a": {12, 0}}},
		{"a prompt the tenant does not hold expires nothing", []op{{"match", "a", p}}, "a", testutil.Tokens(40, 8), 0, 0, map[string][2]int{"a": {12, 0}}},
	}
	for _, policy := range []string{"lru", "lfu", "fifo", "mru", "filo", "priority"} {
		for _, c := range cases {
			t.Run(policy+"/"+c.name, func(t *testing.T) {
				tr := mustNew(t, Config{PageSize: 4, Policy: policy})
				var ticks []uint64
				for _, o := range c.history {
					ticks = append(ticks, o.apply(t, tr))
				}
				var tick uint64
				if c.expire >= 0 {
					tick = ticks[c.expire]
				}
				if got := tr.ExpireSpeculative(c.ids, c.tenant, tick); got != c.want {
					t.Errorf("ExpireSpeculative = %d, want %d", got, c.want)
				}
				m := tr.Match(p)
				if len(m.Tenants) != len(c.after) {
					t.Errorf("after: %+v, want %v", m.Tenants, c.after)
				}
				for tn, want := range c.after {
					if got := reachOf(m, tn); got != want {
						t.Errorf("after: %s {Tokens, Confirmed} = %v, want %v", tn, got, want)
					}
				}
				checkInvariants(t, tr)
			})
		}
	}
}

// TestTrimRemovesConfirmed checks that Trim, which removal events use, takes
// confirmed and speculative holdings alike.
func TestTrimRemovesConfirmed(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 2})
	tr.InsertConfirmed(testutil.Tokens(0, 8), "a")
	tr.Insert(testutil.Tokens(0, 12), "a")
	tr.Trim(testutil.Tokens(0, 8), "a", 4)
	if got := reachOf(tr.Match(testutil.Tokens(0, 12)), "a"); got != [2]int{4, 4} {
		t.Fatalf("after Trim: {Tokens, Confirmed} = %v, want [4 4]", got)
	}
	if s := tr.Stats(); s.TenantTokens["a"] != 4 || s.TenantConfirmed["a"] != 4 || s.ConfirmedTokens != 4 {
		t.Fatalf("stats after Trim: %+v", s)
	}
	checkInvariants(t, tr)
}

func TestClearTenantKeepsSettings(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 2})
	tr.SetTenantLimit("a", 8)
	tr.InsertConfirmed(testutil.Tokens(0, 6), "a")
	tr.Insert(testutil.Tokens(0, 8), "b")
	tr.ClearTenant("a")
	if m := tr.Match(testutil.Tokens(0, 8)); m.Of("a") != 0 || m.Of("b") != 8 {
		t.Fatalf("after ClearTenant(a): %+v", m)
	}
	if s := tr.Stats(); s.Tokens != 8 || s.ConfirmedTokens != 0 || len(s.TenantTokens) != 1 {
		t.Fatalf("stats after ClearTenant(a): %+v", s)
	}
	tr.Insert(testutil.Tokens(100, 20), "a") // the limit of 8 still applies
	if n := tr.TenantTokens("a"); n > 8 {
		t.Fatalf("a holds %d tokens after ClearTenant, limit 8", n)
	}
	tr.RemoveTenant("a")
	tr.Insert(testutil.Tokens(100, 20), "a") // RemoveTenant dropped the limit
	if n := tr.TenantTokens("a"); n != 20 {
		t.Fatalf("a holds %d tokens after RemoveTenant, want 20 (no limit)", n)
	}
	tr.ClearTenant("nobody")
	checkInvariants(t, tr)
}

// TestTenantLimit pins the per-tenant limit: page size 4, LRU, and each
// case's prompts inserted one after another (each a 4-page prompt of its own
// unless it says otherwise).
func TestTenantLimit(t *testing.T) {
	x, y, z := testutil.Tokens(0, 16), testutil.Tokens(100, 16), testutil.Tokens(200, 16)
	cases := []struct {
		name    string
		limit   int
		history []op
		want    map[string]int // tenant: tokens held afterwards
		gone    [][]uint32     // prompts a no longer holds at all
	}{
		{"under the limit nothing goes", 32, []op{{"spec", "a", x}, {"conf", "a", y}}, map[string]int{"a": 32}, nil},
		// A limit of 34 evicts until a holds at most 34: one prompt.
		{"the least recently used goes first", 34, []op{{"spec", "a", x}, {"spec", "a", y}, {"spec", "a", x}, {"spec", "a", z}},
			map[string]int{"a": 32}, [][]uint32{y}},
		{"speculative holdings go before confirmed ones", 34, []op{{"conf", "a", x}, {"spec", "a", y}, {"spec", "a", z}},
			map[string]int{"a": 32}, [][]uint32{y}},
		{"confirmed holdings at the limit stay whole", 32, []op{{"conf", "a", x}, {"conf", "a", y}, {"spec", "a", z}},
			map[string]int{"a": 32}, [][]uint32{z}},
		{"confirmed holdings go when nothing speculative is left", 34, []op{{"conf", "a", x}, {"conf", "a", y}, {"conf", "a", z}},
			map[string]int{"a": 32}, [][]uint32{x}},
		{"other tenants are not touched", 17, []op{{"spec", "b", x}, {"spec", "a", y}, {"spec", "a", z}, {"spec", "b", y}},
			map[string]int{"a": 16, "b": 32}, [][]uint32{y}},
		{"a prompt over the limit keeps the part it shares", 24, []op{{"spec", "a", x[:8]}, {"spec", "a", testutil.Tokens(0, 32)}},
			map[string]int{"a": 8}, nil},
		{"down to the limit, not under it", 64, []op{{"spec", "a", testutil.Tokens(0, 64)}, {"spec", "a", cat(testutil.Tokens(0, 60), testutil.Tokens(900, 4))}},
			map[string]int{"a": 64}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := mustNew(t, Config{PageSize: 4})
			tr.SetTenantLimit("a", c.limit)
			for _, o := range c.history {
				o.apply(t, tr)
				if n := tr.TenantTokens("a"); n > c.limit {
					t.Fatalf("a holds %d tokens after an insert, limit %d", n, c.limit)
				}
			}
			for tn, want := range c.want {
				if got := tr.TenantTokens(tn); got != want {
					t.Errorf("%s holds %d tokens, want %d (held %v)", tn, got, want, held(tr))
				}
			}
			for _, g := range c.gone {
				if n := tr.Match(g).Of("a"); n != 0 {
					t.Errorf("a still holds %d tokens of %v", n, g[:1])
				}
			}
			checkInvariants(t, tr)
		})
	}
}

func TestSetTenantLimitEvictsAtOnce(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 4})
	for i := range 8 {
		tr.Insert(testutil.Tokens(uint32(i*100), 16), "a")
	}
	tr.SetTenantLimit("a", 64)
	if n := tr.TenantTokens("a"); n != 64 {
		t.Fatalf("a holds %d tokens after SetTenantLimit(64), want 64", n)
	}
	for i := range 4 {
		if n := tr.Match(testutil.Tokens(uint32(i*100), 16)).Of("a"); n != 0 {
			t.Fatalf("prompt %d (among the least recent) kept %d tokens", i, n)
		}
	}
	tr.SetTenantLimit("a", 0)
	for i := range 8 {
		tr.Insert(testutil.Tokens(uint32(1000+i*100), 16), "a")
	}
	if n := tr.TenantTokens("a"); n != 64+128 {
		t.Fatalf("a holds %d tokens with no limit, want %d", n, 64+128)
	}
}

func TestHoldings(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 2})
	tr.InsertConfirmed([]uint32{1, 1, 2, 2}, "a")
	tr.Insert([]uint32{1, 1, 2, 2, 3, 3}, "a")
	tr.Insert([]uint32{1, 1, 4, 4}, "a")
	tr.Insert([]uint32{1, 1, 2, 2, 9, 9}, "b")
	cases := []struct {
		tenant    string
		confirmed bool
		want      string
	}{
		{"a", false, "[[1 1] [1 1 2 2] [1 1 2 2 3 3] [1 1 4 4]]"},
		{"a", true, "[[1 1] [1 1 2 2]]"},
		{"b", false, "[[1 1] [1 1 2 2] [1 1 2 2 9 9]]"},
		{"b", true, "[]"},
		{"nobody", false, "[]"},
	}
	for _, c := range cases {
		if got := fmt.Sprint(tr.Holdings(c.tenant, c.confirmed)); got != c.want {
			t.Errorf("Holdings(%s, %v) = %s, want %s", c.tenant, c.confirmed, got, c.want)
		}
	}
}

package tree

import (
	"github.com/kvgate/kvgate/internal/testutil"
	"slices"
	"sort"
	"strings"
	"testing"
)

func cat(parts ...[]uint32) []uint32 { return slices.Concat(parts...) }

func mustNew(t *testing.T, cfg Config) *Tree {
	t.Helper()
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// held lists what each tenant holds, as "tenant:len" leaf paths, sorted.
func held(tr *Tree) []string {
	var out []string
	tr.Walk(func(tenant string, path []uint32) {
		out = append(out, tenant+":"+strings.Trim(strings.Join(strings.Fields(fmtIDs(path)), ","), "[]"))
	})
	sort.Strings(out)
	return out
}

func fmtIDs(ids []uint32) string {
	var b strings.Builder
	for i, v := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(string(rune('a' + v%26)))
	}
	return b.String()
}

func TestNewRejects(t *testing.T) {
	for _, cfg := range []Config{{PageSize: -1}, {MaxTokens: -1}, {Policy: "random"}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
	if tr := mustNew(t, Config{}); tr.PageSize() != 16 {
		t.Errorf("default page size %d, want 16", tr.PageSize())
	}
}

// TestMatchSpec pins page cutting, page-boundary splits and tenants sharing
// prefixes: each case inserts prompts, then matches one.
func TestMatchSpec(t *testing.T) {
	type ins struct {
		tenant string
		ids    []uint32
	}
	cases := []struct {
		name      string
		pageSize  int
		inserts   []ins
		query     []uint32
		input     int
		want      map[string]int
		nodes     int
		storedFor map[string]int
	}{
		{"odd input is cut to whole pages", 4, []ins{{"a", testutil.Tokens(0, 10)}}, testutil.Tokens(0, 11), 8, map[string]int{"a": 8}, 1, map[string]int{"a": 8}},
		{"short query below one page", 4, []ins{{"a", testutil.Tokens(0, 8)}}, testutil.Tokens(0, 3), 0, map[string]int{}, 1, nil},
		{"query shorter than stored prefix", 4, []ins{{"a", testutil.Tokens(0, 12)}}, testutil.Tokens(0, 6), 4, map[string]int{"a": 4}, 1, nil},
		{"divergence inside a page splits at the page start", 4,
			[]ins{{"a", testutil.Tokens(0, 8)}, {"b", cat(testutil.Tokens(0, 5), []uint32{99, 99, 99})}},
			testutil.Tokens(0, 8), 8, map[string]int{"a": 8, "b": 4}, 3, map[string]int{"a": 8, "b": 8}},
		{"divergence at a page boundary", 4,
			[]ins{{"a", testutil.Tokens(0, 8)}, {"b", cat(testutil.Tokens(0, 4), testutil.Tokens(50, 4))}},
			cat(testutil.Tokens(0, 4), testutil.Tokens(50, 4)), 8, map[string]int{"a": 4, "b": 8}, 3, nil},
		{"first page differs in its last token", 4,
			[]ins{{"a", []uint32{1, 2, 3, 4}}, {"b", []uint32{1, 2, 3, 5}}},
			[]uint32{1, 2, 3, 5}, 4, map[string]int{"b": 4}, 2, nil},
		{"tenants sharing a prefix keep their own depths", 2,
			[]ins{{"a", testutil.Tokens(0, 6)}, {"b", testutil.Tokens(0, 4)}, {"c", testutil.Tokens(0, 2)}},
			testutil.Tokens(0, 6), 6, map[string]int{"a": 6, "b": 4, "c": 2}, 3, map[string]int{"a": 6, "b": 4, "c": 2}},
		{"same prompt twice stores once", 1,
			[]ins{{"a", testutil.Tokens(0, 5)}, {"a", testutil.Tokens(0, 5)}},
			testutil.Tokens(0, 5), 5, map[string]int{"a": 5}, 1, map[string]int{"a": 5}},
		{"no match", 2, []ins{{"a", testutil.Tokens(0, 4)}}, testutil.Tokens(10, 4), 4, map[string]int{}, 1, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := mustNew(t, Config{PageSize: c.pageSize})
			for _, in := range c.inserts {
				tr.Insert(in.ids, in.tenant)
			}
			m := tr.Match(c.query)
			if m.Input != c.input {
				t.Errorf("Input = %d, want %d", m.Input, c.input)
			}
			got := map[string]int{}
			for _, tm := range m.Tenants {
				got[tm.Tenant] = tm.Tokens
			}
			if len(got) != len(c.want) {
				t.Errorf("Tenants = %v, want %v", m.Tenants, c.want)
			}
			for tn, w := range c.want {
				if got[tn] != w || m.Of(tn) != w {
					t.Errorf("match for %s = %d, want %d", tn, got[tn], w)
				}
			}
			s := tr.Stats()
			if s.Nodes != c.nodes {
				t.Errorf("Nodes = %d, want %d (held %v)", s.Nodes, c.nodes, held(tr))
			}
			for tn, w := range c.storedFor {
				if s.TenantTokens[tn] != w || tr.TenantTokens(tn) != w {
					t.Errorf("TenantTokens[%s] = %d, want %d", tn, s.TenantTokens[tn], w)
				}
			}
			checkInvariants(t, tr)
		})
	}
}

func TestMatchInsertInsertsForChosenTenant(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 2})
	tr.Insert(testutil.Tokens(0, 4), "a")
	m, got := tr.MatchInsert(testutil.Tokens(0, 7), func(m Match) string {
		if m.Input != 6 || m.Of("a") != 4 {
			t.Errorf("choose saw %+v", m)
		}
		return "b"
	})
	if got != "b" || m.Of("a") != 4 || m.Of("b") != 0 {
		t.Fatalf("MatchInsert = %+v, %q", m, got)
	}
	if n := tr.Match(testutil.Tokens(0, 7)).Of("b"); n != 6 {
		t.Fatalf("b holds %d after MatchInsert, want 6", n)
	}
	if _, got := tr.MatchInsert(testutil.Tokens(20, 4), func(Match) string { return "" }); got != "" || tr.Stats().UniqueTokens != 6 {
		t.Fatalf("choosing nobody inserted: %+v", tr.Stats())
	}
}

func TestTrim(t *testing.T) {
	prompt := testutil.Tokens(0, 12)
	cases := []struct {
		name string
		keep int
		want []string // leaf paths held, as tenant:len
		a    int      // a's match for prompt afterwards
	}{
		{"keep all", 12, []string{"a:12", "a:8+", "b:12"}, 12},
		{"keep beyond the prompt", 40, []string{"a:12", "a:8+", "b:12"}, 12},
		{"keep inside a node rounds down to a page", 7, []string{"a:6", "b:12"}, 6},
		{"keep at a node boundary leaves other branches", 8, []string{"a:8+", "b:12"}, 8},
		{"keep nothing", 0, []string{"b:12"}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := mustNew(t, Config{PageSize: 2})
			tr.Insert(prompt, "a")
			tr.Insert(cat(testutil.Tokens(0, 8), testutil.Tokens(90, 4)), "a") // a branch below 8
			tr.Insert(prompt, "b")
			tr.Trim(prompt, "a", c.keep)
			var got []string
			tr.Walk(func(tenant string, path []uint32) {
				s := tenant + ":" + string(rune('0'+len(path)/10)) + string(rune('0'+len(path)%10))
				if path[len(path)-1] >= 90 {
					s = tenant + ":8+"
				}
				got = append(got, strings.Replace(s, ":0", ":", 1))
			})
			sort.Strings(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("held %v, want %v", got, c.want)
			}
			if n := tr.Match(prompt).Of("a"); n != c.a {
				t.Errorf("a matches %d, want %d", n, c.a)
			}
			if n := tr.Match(prompt).Of("b"); n != 12 {
				t.Errorf("b matches %d, want 12", n)
			}
			checkInvariants(t, tr)
		})
	}
}

func TestRemoveTenant(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 1})
	tr.Insert(testutil.Tokens(0, 6), "a")
	tr.Insert(testutil.Tokens(0, 3), "b")
	tr.Insert(cat(testutil.Tokens(0, 3), testutil.Tokens(50, 3)), "a")
	tr.RemoveTenant("a")
	if m := tr.Match(testutil.Tokens(0, 6)); m.Of("a") != 0 || m.Of("b") != 3 {
		t.Fatalf("after RemoveTenant(a): %+v", m)
	}
	s := tr.Stats()
	if s.Nodes != 1 || s.Tokens != 3 || s.UniqueTokens != 3 || len(s.TenantTokens) != 1 {
		t.Fatalf("stats after RemoveTenant(a): %+v", s)
	}
	tr.RemoveTenant("nobody")
	tr.Insert(testutil.Tokens(0, 2), "a") // the name comes back fresh
	if n := tr.Match(testutil.Tokens(0, 6)).Of("a"); n != 2 {
		t.Fatalf("a re-added matches %d, want 2", n)
	}
	tr.RemoveTenant("b")
	tr.RemoveTenant("a")
	if s := tr.Stats(); s.Nodes != 0 || s.Tokens != 0 || s.UniqueTokens != 0 {
		t.Fatalf("empty tree stats: %+v", s)
	}
	checkInvariants(t, tr)
	if len(tr.free) != len(tr.tenants) {
		t.Fatalf("ids not freed: %d free of %d", len(tr.free), len(tr.tenants))
	}
}

// setBudget sets the budget of a tree built without one, so a test can build
// a history over budget (inserts evict at once otherwise) and then Evict.
func setBudget(tr *Tree, max int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.maxTokens = max
}

// TestEvictionOrder runs the same history under each policy on a tiny tree.
// Three 2-token prompts X, Y, Z (one node each) are touched in this order,
// with these priorities:
//
//	X(p5) Y(p1) Z(p9) Z Z Y X
//
// so: created X<Y<Z; last used Z<Y<X; uses X=2 Y=2 Z=3; priority Y<X<Z.
func TestEvictionOrder(t *testing.T) {
	x, y, z := []uint32{1, 1}, []uint32{2, 2}, []uint32{3, 3}
	cases := []struct {
		policy      string
		first, last string // evicted first (budget 4), survivor (budget 2)
	}{
		{"lru", "Z", "X"},
		{"mru", "X", "Z"},
		{"fifo", "X", "Z"},
		{"filo", "Z", "X"},
		{"lfu", "Y", "Z"},      // X and Y tie on uses; Y is less recent
		{"priority", "Y", "Z"}, // lowest priority first
		{"", "Z", "X"},         // default is LRU
		{"LRU", "Z", "X"},      // case-insensitive
	}
	names := map[uint32]string{1: "X", 2: "Y", 3: "Z"}
	for _, c := range cases {
		for _, budget := range []int{4, 2} {
			tr := mustNew(t, Config{PageSize: 1, Policy: c.policy})
			for _, op := range []struct {
				ids []uint32
				p   int32
			}{{x, 5}, {y, 1}, {z, 9}, {z, 9}, {z, 9}, {y, 1}, {x, 5}} {
				tr.InsertPriority(op.ids, "w", op.p)
			}
			setBudget(tr, budget)
			if n := tr.Evict(); n != 6-budget {
				t.Fatalf("%s: Evict = %d, want %d", c.policy, n, 6-budget)
			}
			var kept []string
			tr.Walk(func(_ string, path []uint32) { kept = append(kept, names[path[0]]) })
			sort.Strings(kept)
			if budget == 4 && slices.Contains(kept, c.first) {
				t.Errorf("%s: kept %v, want %s evicted first", c.policy, kept, c.first)
			}
			if budget == 2 && !slices.Equal(kept, []string{c.last}) {
				t.Errorf("%s: kept %v, want only %s", c.policy, kept, c.last)
			}
		}
	}
}

// TestEvictionPerTenant checks that a shared node loses its least recent
// tenant first and stays for the other, as each engine evicts its own cache.
func TestEvictionPerTenant(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 2})
	tr.Insert(testutil.Tokens(0, 4), "a")
	tr.Insert(testutil.Tokens(0, 4), "b")
	tr.Insert(testutil.Tokens(0, 4), "b")
	setBudget(tr, 4)
	if n := tr.Evict(); n != 4 {
		t.Fatalf("Evict = %d, want 4", n)
	}
	if m := tr.Match(testutil.Tokens(0, 4)); m.Of("a") != 0 || m.Of("b") != 4 {
		t.Fatalf("after Evict: %+v", m)
	}
	if s := tr.Stats(); s.Nodes != 1 || s.Tokens != 4 {
		t.Fatalf("stats: %+v", s)
	}
	// A deeper leaf goes before its parent even when the parent is older
	// for another reason: only the frontier is evictable.
	tr = mustNew(t, Config{PageSize: 2})
	tr.Insert(testutil.Tokens(0, 6), "a")
	setBudget(tr, 2)
	if n := tr.Evict(); n != 6 || tr.Stats().Tokens != 0 {
		t.Fatalf("Evict = %d, stats %+v", n, tr.Stats())
	}
	tr = mustNew(t, Config{PageSize: 2})
	tr.Insert(testutil.Tokens(0, 6), "a")
	tr.Insert(testutil.Tokens(0, 2), "a")
	setBudget(tr, 4)
	tr.Evict()
	if got := tr.Match(testutil.Tokens(0, 6)).Of("a"); got != 2 {
		t.Fatalf("a holds %d after evicting its leaf, want 2", got)
	}
}

// TestStatsReportsTheBudget: Stats carries the configured budget, which the
// router exports as kvgate_tree_max_tokens (0 only for an unbounded tree).
func TestStatsReportsTheBudget(t *testing.T) {
	for _, budget := range []int{0, 16, 1 << 26} {
		if got := mustNew(t, Config{PageSize: 16, MaxTokens: budget}).Stats().MaxTokens; got != budget {
			t.Errorf("MaxTokens %d configured, Stats says %d", budget, got)
		}
	}
}

package tree

import (
	"fmt"
	"github.com/kvgate/kvgate/internal/testutil"
	"slices"
	"strings"
	"testing"
)

// dump describes every node of tr (tokens, and each holder's tenant, tick,
// aux and confirmation) in a canonical order, so two trees can be compared
// exactly, eviction keys included.
func dump(tr *Tree) string {
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	var b strings.Builder
	var walk func(n *node, depth int)
	walk = func(n *node, depth int) {
		hs := slices.Clone(n.holders)
		slices.SortFunc(hs, func(a, b holder) int { return int(a.id()) - int(b.id()) })
		fmt.Fprintf(&b, "%*s%v %v\n", depth, "", n.tokens, hs)
		// Children in the order of their tokens: their order in kids
		// follows the tree's seeded page hash.
		kids := slices.Clone(n.kids)
		slices.SortFunc(kids, func(a, b kid) int { return slices.Compare(a.n.tokens, b.n.tokens) })
		for _, k := range kids {
			walk(k.n, depth+1)
		}
	}
	walk(&tr.root, 0)
	fmt.Fprintf(&b, "clock %d nodes %d tokens %d unique %d\n", tr.clock, tr.nodes, tr.tokens, tr.unique)
	return b.String()
}

// TestExtendIsInsertOfBoth checks that Extend leaves the tree exactly as
// inserting prompt+reply from the root does, and that it continued below
// the prompt's insert when it could (endOf found the node), whether the
// prompt ends on a page boundary or not, and whether the reply is new, known
// or shorter than a page.
func TestExtendIsInsertOfBoth(t *testing.T) {
	prompt := testutil.Tokens(100, 40)
	cases := []struct {
		name          string
		prompt, reply []uint32
	}{
		{"page-aligned prompt, new reply", prompt, testutil.Tokens(500, 21)},
		{"prompt ends mid-page", prompt[:38], testutil.Tokens(500, 21)},
		{"reply already held", prompt, testutil.Tokens(300, 12)},
		{"reply shorter than a page", prompt, testutil.Tokens(500, 2)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, policy := range []string{"lru", "lfu", "fifo", "priority"} {
				ext, ins := mustNew(t, Config{PageSize: 4, Policy: policy}), mustNew(t, Config{PageSize: 4, Policy: policy})
				for _, tr := range []*Tree{ext, ins} {
					tr.Insert(cat(prompt[:20], testutil.Tokens(900, 30)), "w1") // a branch inside the prompt
					tr.Insert(cat(prompt, testutil.Tokens(300, 12)), "w0")      // a reply seen before
				}
				var ticks [2]uint64
				for i, tr := range []*Tree{ext, ins} {
					m, _ := tr.MatchInsert(c.prompt, func(Match) string { return "w1" })
					ticks[i] = m.Tick
				}
				tick := ticks[0]
				ext.mu.Lock()
				found := ext.endOf(tick, ext.cut(c.prompt), "w1") != nil
				ext.mu.Unlock()
				if !found {
					t.Fatalf("%s: the prompt's insert at %d is not remembered", policy, tick)
				}
				got := ext.Extend(tick, c.prompt, c.reply, "w1")
				ins.Insert(cat(c.prompt, c.reply), "w1")
				if want := ins.clock; got != want {
					t.Errorf("%s: Extend's tick = %d, want %d", policy, got, want)
				}
				if g, w := dump(ext), dump(ins); g != w {
					t.Fatalf("%s: after Extend\n%s\nafter inserting both\n%s", policy, g, w)
				}
				checkInvariants(t, ext)
			}
		})
	}
}

// TestExtendFallsBack checks that Extend inserts prompt+reply from the root
// when the prompt's insert can no longer be continued, leaving the tree as
// inserting both does: the tick is 0 or forgotten, the tenant lost the
// prompt's end (trimmed, evicted, removed), or the tick belongs to another
// prompt.
func TestExtendFallsBack(t *testing.T) {
	prompt, other, reply := testutil.Tokens(100, 40), testutil.Tokens(700, 40), testutil.Tokens(500, 21)
	cases := []struct {
		name      string
		meanwhile func(tr *Tree)
		tick      func(prompt, other uint64) uint64
	}{
		{"tick 0", nil, func(uint64, uint64) uint64 { return 0 }},
		{"tick of another prompt", nil, func(_, o uint64) uint64 { return o }},
		{"forgotten", func(tr *Tree) {
			for i := range endSlots {
				tr.Insert(testutil.Tokens(uint32(10_000+i%50), 4), "w2")
			}
		}, nil},
		{"trimmed", func(tr *Tree) { tr.Trim(prompt, "w1", 8) }, nil},
		{"removed", func(tr *Tree) { tr.RemoveTenant("w1") }, nil},
		{"evicted", func(tr *Tree) {
			setBudget(tr, 1)
			tr.Evict()
			setBudget(tr, 0)
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ext, ins := mustNew(t, Config{PageSize: 4}), mustNew(t, Config{PageSize: 4})
			var p, o uint64
			for _, tr := range []*Tree{ext, ins} {
				tr.Insert(cat(prompt, testutil.Tokens(300, 12)), "w0")
				o = tr.InsertSpeculative(other, "w1")
				p = tr.InsertSpeculative(prompt, "w1")
				if c.meanwhile != nil {
					c.meanwhile(tr)
				}
			}
			tick := p
			if c.tick != nil {
				tick = c.tick(p, o)
			}
			ext.mu.Lock()
			found := ext.endOf(tick, prompt, "w1") != nil
			ext.mu.Unlock()
			if found {
				t.Fatalf("the prompt's insert at %d still counts as continuable", tick)
			}
			got := ext.Extend(tick, prompt, reply, "w1")
			if want := ins.InsertSpeculative(cat(prompt, reply), "w1"); got != want {
				t.Errorf("Extend's tick = %d, want %d", got, want)
			}
			if g, w := dump(ext), dump(ins); g != w {
				t.Fatalf("after Extend\n%s\nafter inserting both\n%s", g, w)
			}
			checkInvariants(t, ext)
		})
	}
}

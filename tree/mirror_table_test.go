package tree

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// homed returns n hashes whose home in t is home (t has its first slots).
func homed(t *blockTable, home uint64, n int) []int64 {
	var hs []int64
	for h := int64(1); len(hs) < n; h++ {
		if t.home(h) == home {
			hs = append(hs, h)
		}
	}
	return hs
}

// TestBlockTable runs the table through runs of hashes sharing a home
// (including one wrapping past the last slot) and checks every hash after
// each step against a map: a delete in the middle of a run must leave the
// hashes after it reachable, and the hash deleted gone.
func TestBlockTable(t *testing.T) {
	type op struct {
		del bool
		h   int64
		r   bref
	}
	tab := newBlockTable()
	tab.put(-1, 1) // allocate the first slots, so homes are fixed
	tab.del(-1, 0)
	last := uint64(len(tab.slots) - 1)
	a, b, w := homed(&tab, 5, 3), homed(&tab, 6, 2), homed(&tab, last, 3)
	z := homed(&tab, 0, 1)
	tests := []struct {
		name string
		ops  []op
	}{
		{"put then get", []op{{h: a[0], r: 1}}},
		{"put replaces the block", []op{{h: a[0], r: 1}, {h: a[0], r: 9}}},
		{"hash 0 is a hash like another", []op{{h: 0, r: 3}, {h: a[0], r: 1}, {del: true, h: 0}}},
		{"delete a hash never put", []op{{h: a[0], r: 1}, {del: true, h: a[1]}}},
		{"delete the head of a run", []op{{h: a[0], r: 1}, {h: a[1], r: 2}, {h: a[2], r: 3}, {del: true, h: a[0]}}},
		{"delete the middle of a run", []op{{h: a[0], r: 1}, {h: a[1], r: 2}, {h: a[2], r: 3}, {del: true, h: a[1]}}},
		{"a run of two homes, each head deleted", []op{
			{h: a[0], r: 1}, {h: b[0], r: 2}, {h: a[1], r: 3}, {h: b[1], r: 4}, {del: true, h: a[0]}, {del: true, h: b[0]}}},
		{"a run wrapping past the last slot", []op{
			{h: w[0], r: 1}, {h: w[1], r: 2}, {h: z[0], r: 3}, {h: w[2], r: 4}, {del: true, h: w[0]}, {del: true, h: z[0]}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab := blockTable{key: tab.key}
			want := map[int64]bref{}
			for step, o := range tt.ops {
				if o.del {
					// Where find says, as the mirror deletes.
					_, slot := tab.find(o.h)
					tab.del(o.h, slot)
					delete(want, o.h)
				} else {
					tab.put(o.h, o.r)
					want[o.h] = o.r
				}
				for _, o := range tt.ops {
					if _, ok := want[o.h]; !ok && tab.get(o.h) != 0 {
						t.Fatalf("step %d: get(%d) = %d after its delete", step, o.h, tab.get(o.h))
					}
				}
				checkBlockTable(t, fmt.Sprint("step ", step), &tab, want)
			}
		})
	}
}

// TestBlockTableChurn grows the table to 20,000 hashes and churns it as an
// engine's events do (a delete and an insert per step), against a map.
func TestBlockTableChurn(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	tab := newBlockTable()
	want := map[int64]bref{}
	var live []int64
	for i := range 200_000 {
		if len(live) > 20_000 || (len(live) > 0 && rng.IntN(4) == 0) {
			k := rng.IntN(len(live))
			// A slot that may not hold the hash: del probes then.
			tab.del(live[k], uint32(i)&uint32(len(tab.slots)-1))
			delete(want, live[k])
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
		} else {
			h := rng.Int64N(1 << 40) // some repeats
			if _, ok := want[h]; !ok {
				live = append(live, h)
			}
			r := bref(i%1000 + 1)
			tab.put(h, r)
			want[h] = r
		}
		if i%9_973 == 0 {
			checkBlockTable(t, fmt.Sprint("step ", i), &tab, want)
		}
	}
	checkBlockTable(t, "end", &tab, want)
}

func checkBlockTable(t *testing.T, step string, tab *blockTable, want map[int64]bref) {
	t.Helper()
	for h, r := range want {
		if got := tab.get(h); got != r {
			t.Fatalf("%s: get(%d) = %d, want %d", step, h, got, r)
		}
	}
	// getAll answers as get does, for held hashes and others alike.
	var blocks []MirrorBlock
	for h := range want {
		blocks = append(blocks, MirrorBlock{Hash: h}, MirrorBlock{Hash: ^h})
	}
	out := make([]bref, len(blocks))
	tab.getAll(blocks, out)
	for i, b := range blocks {
		if out[i] != tab.get(b.Hash) || (i%2 == 0 && out[i] != want[b.Hash]) {
			t.Fatalf("%s: getAll gives %d for %d; get %d", step, out[i], b.Hash, tab.get(b.Hash))
		}
	}
	n := 0
	for h, r := range tab.all() {
		if want[h] != r {
			t.Fatalf("%s: all yields %d → %d, want %d", step, h, r, want[h])
		}
		n++
	}
	if n != len(want) || tab.len() != len(want) {
		t.Fatalf("%s: %d entries walked, len %d, want %d", step, n, tab.len(), len(want))
	}
}

// hashIndex is what BenchmarkBlockTableChurn compares.
type hashIndex interface {
	get(int64) bref
	put(int64, bref)
	del(int64)
}

// tableIndex is a blockTable as a hashIndex: it deletes as Mirror.Remove
// does, from the slot its lookup found.
type tableIndex struct{ *blockTable }

func (t tableIndex) del(h int64) {
	_, slot := t.find(h)
	t.blockTable.del(h, slot)
}

// goMap is the Go map blockTable replaced, as a hashIndex.
type goMap map[int64]bref

func (m goMap) get(h int64) bref    { return m[h] }
func (m goMap) put(h int64, r bref) { m[h] = r }
func (m goMap) del(h int64)         { delete(m, h) }

// BenchmarkBlockTableChurn churns 262,144 hashes (a cache's worth of
// blocks) as a full engine's events do: per op, a hash known is looked up
// and removed, an unknown one looked up and added. The Go map blockTable
// replaced is measured beside it.
func BenchmarkBlockTableChurn(b *testing.B) {
	const n = 1 << 18
	for _, c := range []struct {
		name string
		make func() hashIndex
	}{
		{"table", func() hashIndex { t := newBlockTable(); return tableIndex{&t} }},
		{"map", func() hashIndex { return goMap{} }},
	} {
		b.Run(c.name, func(b *testing.B) {
			idx := c.make()
			rng := rand.New(rand.NewPCG(1, 2))
			ring := make([]int64, n)
			for i := range ring {
				ring[i] = rng.Int64()
				idx.put(ring[i], bref(i+1))
			}
			i := 0
			for b.Loop() {
				p := i % n
				if idx.get(ring[p]) == 0 {
					b.Fatal("lost a hash")
				}
				idx.del(ring[p])
				h := rng.Int64()
				if idx.get(h) != 0 {
					b.Fatal("found a hash never put")
				}
				idx.put(h, bref(p+1))
				ring[p] = h
				i++
			}
		})
	}
}

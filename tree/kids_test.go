package tree

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestWideNodeChildren adds children to a node past wideAt and removes
// them, in random order, below narrowAt and to none, then adds them again,
// with distinct keys and with keys shared by several children (the
// accident a seeded 64-bit hash makes rare, and lookups handle by tokens).
// After every step the index agrees with the children, and every child is
// found by its key and first page, and by itself.
func TestWideNodeChildren(t *testing.T) {
	tests := []struct {
		name string
		keys int // distinct keys among the children
	}{
		{"distinct keys", 1 << 20},
		{"every key shared by about six children", 50},
		{"one key for all", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tt.keys)))
			n := &node{}
			var live []kid
			check := func(step string) {
				t.Helper()
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("%s: %v", step, r)
					}
				}()
				checkKidIndex(n)
				if len(n.kids) != len(live) {
					t.Fatalf("%s: %d children, want %d", step, len(n.kids), len(live))
				}
				for _, k := range live {
					if c := n.child(k.key, k.n.tokens[:4]); c != k.n {
						t.Fatalf("%s: child(%x, %v) = %p, want %p", step, k.key, k.n.tokens[:4], c, k.n)
					}
					if i := n.kidSlot(k.n, k.key); n.kids[i].n != k.n {
						t.Fatalf("%s: kidSlot gives %d, holding another child", step, i)
					}
				}
				if c := n.child(7, []uint32{1 << 30, 0, 0, 0}); c != nil {
					t.Fatalf("%s: a page no child starts with found %p", step, c)
				}
			}
			next := 0
			add := func(count int) {
				for range count {
					c := &node{tokens: []uint32{uint32(next), 1, 2, 3}, parent: n}
					key := uint64(next%tt.keys) * 0x9e3779b97f4a7c15
					next++
					n.addKid(c, key)
					live = append(live, kid{key, c})
					check(fmt.Sprintf("after adding child %d", next))
				}
			}
			remove := func(count int) {
				for range count {
					j := rng.IntN(len(live))
					gone := live[j]
					n.removeKid(n.kidSlot(gone.n, gone.key))
					live = append(live[:j], live[j+1:]...)
					check(fmt.Sprintf("after removing the child of %v", gone.n.tokens[:1]))
				}
			}
			add(wideAt + 172)
			if n.wide == nil {
				t.Fatalf("%d children and no index", len(n.kids))
			}
			remove(len(live) - narrowAt + 1)
			if n.wide != nil {
				t.Fatalf("%d children and an index", len(n.kids))
			}
			add(wideAt)
			remove(len(live))
			if n.kids != nil || n.wide != nil {
				t.Fatalf("no children left, kids %v, index %v", n.kids, n.wide)
			}
		})
	}
}

// BenchmarkKidIndexBytes reports what a wide node's index costs in memory
// per child, for 65,536 children with distinct keys.
func BenchmarkKidIndexBytes(b *testing.B) {
	const kids = 1 << 16
	var before, after runtime.MemStats
	for range b.N {
		runtime.GC()
		runtime.ReadMemStats(&before)
		w := &kidIndex{at: make(map[uint64]int32, kids)}
		for i := range kids {
			w.note(uint64(i)*0x9e3779b97f4a7c15, i)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/kids, "bytes/child")
		runtime.KeepAlive(w)
	}
}

// BenchmarkWideNode inserts prompts of 1,024 tokens that share no first
// page into a tree held at its budget, so the root has a child per prompt
// it holds and every insert adds one and evicts one: the cost of a node of
// many children, by their number.
func BenchmarkWideNode(b *testing.B) {
	for _, kids := range []int{1 << 10, 1 << 12, 1 << 14, 1 << 16} {
		b.Run(fmt.Sprintf("children=%d", kids), func(b *testing.B) {
			const plen = 1024
			tr, err := New(Config{PageSize: 16, MaxTokens: kids * plen})
			if err != nil {
				b.Fatal(err)
			}
			p := make([]uint32, plen)
			fill := func(i int) {
				x := uint32(i)*2654435761 + 1
				for j := range p {
					x ^= x << 13
					x ^= x >> 17
					x ^= x << 5
					p[j] = x % 128000
				}
			}
			for i := range kids {
				fill(i)
				tr.Insert(p, "w")
			}
			b.ResetTimer()
			for i := range b.N {
				fill(kids + i)
				tr.Insert(p, "w")
			}
		})
	}
}

package tree

import (
	"cmp"
	"slices"
)

// A node's children are told apart by their first page's key (Tree.key).
// A node with few children keeps them sorted by key and finds one by binary
// search; adding or removing one shifts the ones after it. Where prompts
// diverge early (at the root for prompts of no common template, or below a
// shared system prompt) a node has a child per prompt the tree holds, and
// the shifts grew with them: 2.4% of the router's CPU at fresh 1K-token
// prompts (an engine's 4M-token cache holds about 4,000 of them, each a
// child of the root), and an insert took 30 µs
// with 65,536 children where it took 7 µs with 1,024 (BenchmarkWideNode,
// BENCHMARKS.md "A node of many children"). Past wideAt children a node indexes them by key in a map,
// adds at the end and removes by moving the last child into the gap;
// below narrowAt it sorts them again and drops the map. Walks of the
// children see them in either order.

// The children counts at which a node starts and stops indexing them: apart,
// so that a node at the edge does not switch on every add and remove.
const (
	wideAt   = 128
	narrowAt = 32
)

// kidIndex is a wide node's index of its children: the position of a child
// with each key. Keys are 64-bit hashes seeded per tree, so two children
// with one key (dups counts them beyond the first) are an accident a lookup
// still handles, by a walk of the children.
type kidIndex struct {
	at   map[uint64]int32
	dups int
}

// kidIndex returns the first index in n.kids whose key is >= key: for a
// node whose children are sorted.
func (n *node) kidIndex(key uint64) int {
	lo, hi := 0, len(n.kids)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if n.kids[m].key < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// addKid adds c, whose first page hashes to key (Tree.key).
func (n *node) addKid(c *node, key uint64) {
	if w := n.wide; w != nil {
		n.kids = append(n.kids, kid{key, c})
		w.note(key, len(n.kids)-1)
		return
	}
	i := n.kidIndex(key)
	n.kids = append(n.kids, kid{})
	copy(n.kids[i+1:], n.kids[i:])
	n.kids[i] = kid{key, c}
	if len(n.kids) > wideAt {
		w := &kidIndex{at: make(map[uint64]int32, len(n.kids))}
		for j, k := range n.kids {
			w.note(k.key, j)
		}
		n.wide = w
	}
}

// note indexes the child at i under key, unless one is indexed there.
func (w *kidIndex) note(key uint64, i int) {
	if _, ok := w.at[key]; ok {
		w.dups++
		return
	}
	w.at[key] = int32(i)
}

// kidSlot returns the index of c, whose first page hashes to key, in n.kids.
func (n *node) kidSlot(c *node, key uint64) int {
	i := 0
	if w := n.wide; w != nil {
		if j, ok := w.at[key]; ok && n.kids[j].n == c {
			return int(j)
		}
	} else {
		i = n.kidIndex(key)
	}
	for ; i < len(n.kids); i++ {
		if n.kids[i].n == c {
			return i
		}
	}
	panic("tree: child missing from its parent")
}

// removeKid removes the child at i.
func (n *node) removeKid(i int) {
	w := n.wide
	if w == nil {
		n.kids = append(n.kids[:i], n.kids[i+1:]...)
		if len(n.kids) == 0 {
			n.kids = nil
		}
		return
	}
	gone, last := n.kids[i], len(n.kids)-1
	indexed := w.at[gone.key] == int32(i)
	if i != last {
		n.kids[i] = n.kids[last]
		if moved := n.kids[i].key; w.at[moved] == int32(last) {
			w.at[moved] = int32(i)
		}
	}
	n.kids[last] = kid{}
	n.kids = n.kids[:last]
	switch {
	case !indexed:
		w.dups--
	case w.dups > 0 && n.reindex(gone.key):
		w.dups--
	default:
		delete(w.at, gone.key)
	}
	if len(n.kids) < narrowAt {
		slices.SortFunc(n.kids, func(a, b kid) int { return cmp.Compare(a.key, b.key) })
		n.wide = nil
	}
}

// reindex points a wide node's index at a child with key, if one is left.
func (n *node) reindex(key uint64) bool {
	for j, k := range n.kids {
		if k.key == key {
			n.wide.at[key] = int32(j)
			return true
		}
	}
	return false
}

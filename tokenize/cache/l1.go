package cache

import (
	"strings"
	"sync"
)

// Memory accounting for L1. A node costs the allocations of its piece and its
// ids (allocSize: the bytes plus size-class rounding) plus:
//
//   - l1NodeOverhead: the node struct (parent, piece header, ids header,
//     children map pointer, two LRU pointers, size: 96 bytes, in the 96-byte
//     size class) and its slot in its parent's children map (16-byte key,
//     8-byte value, control byte, load factor and growth headroom: ~64
//     bytes), rounded up;
//   - l1MapOverhead, once for a node that has children: the map header and its
//     first slot group (8 slots of 24 bytes plus control word, ~250 bytes).
//
// Both are rounded up; TestL1AccountingTracksHeap checks against the heap.
const (
	l1NodeOverhead = 192
	l1MapOverhead  = 272
)

type l1Node struct {
	parent     *l1Node
	piece      string   // text from the parent's boundary to this node's boundary
	ids        []uint32 // ids of piece alone; immutable once stored
	children   map[string]*l1Node
	prev, next *l1Node // LRU list; parents are always more recent than children
	size       int64
}

// l1 is the boundary-prefix cache: a tree whose root-to-node paths are text
// prefixes ending at a boundary, one root per addSpecial value. A node stores
// only its own piece and its ids, so conversations that share a system prompt
// or earlier turns share those nodes, and a conversation of n bytes costs O(n)
// whatever its number of turns.
//
// LRU order is kept so that a node is always more recent than its children
// (paths are touched deepest first), hence the least recent node is a leaf
// and eviction never orphans a subtree.
type l1 struct {
	mu       sync.Mutex
	roots    [2]l1Node
	lru      l1Node // sentinel
	bytes    int64
	max      int64
	maxEntry int64 // largest node stored: MaxEntryBytes, at most max
	entries  int
}

func newL1(maxBytes, maxEntry int64) *l1 {
	c := &l1{max: maxBytes, maxEntry: min(maxEntry, maxBytes)}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

func rootIndex(add bool) int {
	if add {
		return 1
	}
	return 0
}

// lookup returns the nodes matching the longest cached run of pieces, in order.
func (c *l1) lookup(dst []*l1Node, pieces []string, add bool) []*l1Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := &c.roots[rootIndex(add)]
	for _, p := range pieces {
		child := n.children[p]
		if child == nil {
			break
		}
		dst = append(dst, child)
		n = child
	}
	for i := len(dst) - 1; i >= 0; i-- {
		c.moveToFront(dst[i])
	}
	return dst
}

// insert stores pieces[i] with ids[i] along one path from the root, creating
// the nodes that are missing (including ones evicted since lookup). Pieces
// larger than maxEntry are not stored, nor anything after them; the size is
// checked before the piece is copied.
func (c *l1) insert(pieces []string, ids [][]uint32, add bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := &c.roots[rootIndex(add)]
	var path []*l1Node
	for i, p := range pieces {
		child := n.children[p]
		if child == nil {
			size := allocSize(len(p)) + allocSize(4*len(ids[i])) + l1NodeOverhead
			if size+l1MapOverhead > c.maxEntry {
				break
			}
			child = &l1Node{
				parent: n,
				piece:  strings.Clone(p),
				ids:    append(make([]uint32, 0, len(ids[i])), ids[i]...),
				size:   size,
			}
			if n.children == nil {
				n.children = make(map[string]*l1Node)
				if n.parent != nil { // roots are not accounted
					n.size += l1MapOverhead
					c.bytes += l1MapOverhead
				}
			}
			n.children[child.piece] = child
			c.bytes += child.size
			c.entries++
			c.pushFront(child)
		}
		path = append(path, child)
		n = child
	}
	for i := len(path) - 1; i >= 0; i-- {
		c.moveToFront(path[i])
	}
	for c.bytes > c.max && c.lru.prev != &c.lru {
		c.evict(c.lru.prev)
	}
}

// evict removes n and, defensively, anything below it. n is normally a leaf
// (see l1); the subtree is walked with an explicit stack because a path is as
// deep as a client's text has boundaries.
func (c *l1) evict(n *l1Node) {
	stack := []*l1Node{n}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		if len(x.children) > 0 {
			for _, child := range x.children {
				stack = append(stack, child)
				break
			}
			continue
		}
		stack = stack[:len(stack)-1]
		c.unlink(x)
		c.bytes -= x.size
		c.entries--
		p := x.parent
		delete(p.children, x.piece)
		if len(p.children) == 0 {
			p.children = nil
			if p.parent != nil {
				p.size -= l1MapOverhead
				c.bytes -= l1MapOverhead
			}
		}
		x.parent = nil
	}
}

func (c *l1) stats() (entries int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries, c.bytes
}

func (c *l1) pushFront(n *l1Node) {
	n.prev, n.next = &c.lru, c.lru.next
	c.lru.next.prev = n
	c.lru.next = n
}

func (c *l1) unlink(n *l1Node) {
	n.prev.next, n.next.prev = n.next, n.prev
	n.prev, n.next = nil, nil
}

func (c *l1) moveToFront(n *l1Node) {
	if c.lru.next == n {
		return
	}
	c.unlink(n)
	c.pushFront(n)
}

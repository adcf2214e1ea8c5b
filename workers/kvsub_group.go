package workers

import (
	"log/slog"
	"strings"
)

// prefixGroups keeps a worker's KV events to those that describe a reusable
// prefix. A hybrid model's engine publishes one cache group per kind of
// attention layer, all under the same block hashes: a sliding-window group
// frees each block as it leaves the window, a linear-attention (mamba)
// group keeps a state that is no prefix at all. Applied to the worker's
// mirror, those groups' removals would take out blocks the full-attention
// group still holds, and their stores would add nothing the engine can
// reuse whole. Blocks the engine says live in a shared pool (remote) are
// not this worker's either.
//
// A removal names its group's index but not its kind, so the kinds are
// learned from the stores: a removal from a group known not to be a prefix
// is dropped, one from a group not seen yet is applied (at worst the mirror
// underpredicts until the block is stored again). It belongs to one
// subscription's goroutine.
type prefixGroups struct {
	prefix map[uint32]bool // group index → its stores are a prefix
	log    *slog.Logger
}

// isPrefix reports whether a store in group g is a prefix the tree may
// match: a full-attention group (MLA included), or one whose engine says
// nothing of its kind and no window.
func (g KVGroup) isPrefix() bool {
	if g.Remote || g.SlidingWindow > 0 {
		return false
	}
	k := strings.ToLower(g.Kind)
	return k == "" || strings.Contains(k, "full") || strings.Contains(k, "mla")
}

// filter drops b's events that are not about a prefix the worker holds,
// in place, and returns how many it dropped.
// Events are moved only once one was dropped: a batch of a model without
// such groups (the usual one) is read, never written.
func (p *prefixGroups) filter(b *KVEventBatch) int {
	n := 0
	for i := range b.Events {
		if !p.keep(&b.Events[i]) {
			continue
		}
		if n != i {
			b.Events[n] = b.Events[i]
		}
		n++
	}
	dropped := len(b.Events) - n
	clear(b.Events[n:])
	b.Events = b.Events[:n]
	return dropped
}

func (p *prefixGroups) keep(e *KVEvent) bool {
	g := e.Group
	switch e.Kind {
	case KVStored:
		prefix := g.isPrefix()
		if g.HasIndex && !g.Remote {
			if was, seen := p.prefix[g.Index]; !seen || was != prefix {
				if p.prefix == nil {
					p.prefix = map[uint32]bool{}
				}
				p.prefix[g.Index] = prefix
				if !prefix && p.log != nil {
					p.log.Info("KV cache group is not a reusable prefix: its events are kept out of the worker's cache mirror",
						"group", g.Index, "kind", g.Kind, "sliding_window", g.SlidingWindow)
				}
			}
		}
		return prefix
	case KVRemoved:
		if g.Remote {
			return false
		}
		prefix, seen := p.prefix[g.Index]
		return !g.HasIndex || !seen || prefix
	}
	return true
}

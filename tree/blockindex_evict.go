package tree

import (
	"math"
	"slices"
)

// Evict brings every backend above MaxBlocksPerBackend down to it, dropping
// its least recently used blocks first (SMG's §7.4, for all backends in
// one pass), and returns the number of holdings dropped. Blocks no backend
// holds any more leave the table.
//
// Since Record and Touch give a request's deeper blocks older epochs, a
// block is never evicted before its descendants that were used at the same
// time or earlier: what a backend holds of a chain stays a prefix of it, as
// Match's binary search assumes, and as engines evict (leaves first).
//
// Evict reads every shard once to find each over-budget backend's cutoff
// epoch, then removes what is at or below it, one shard at a time, so
// routing waits at most one shard's scan. A block used meanwhile gets a newer
// epoch and is spared.
func (x *BlockIndex) Evict() int {
	x.evictMu.Lock()
	defer x.evictMu.Unlock()
	return x.evictLocked()
}

// blockCutoff is one over-budget backend's eviction: how many holdings to
// drop, their epochs, and the newest epoch that goes.
type blockCutoff struct {
	need   int
	epochs []uint64
	cutoff uint64
}

// evictLocked runs an eviction; evictMu is held.
func (x *BlockIndex) evictLocked() int {
	x.backendsMu.RLock()
	defer x.backendsMu.RUnlock()

	over := make([]*blockCutoff, len(x.byID))
	found := false
	for id, b := range x.byID {
		if b == nil {
			continue
		}
		if n := int(b.blocks.Load()); n > x.maxBlocks {
			over[id] = &blockCutoff{need: n - x.maxBlocks, epochs: make([]uint64, 0, n)}
			found = true
		}
	}
	if !found {
		return 0
	}

	collect := func(h blockHolder) {
		if c := over[h.id]; c != nil {
			c.epochs = append(c.epochs, h.epoch)
		}
	}
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.RLock()
		for _, e := range s.blocks {
			collect(blockHolder{epoch: e.epoch, id: e.id})
			if e.more != 0 {
				for _, h := range s.more[e.more-1] {
					collect(h)
				}
			}
		}
		s.mu.RUnlock()
	}
	for _, c := range over {
		if c == nil {
			continue
		}
		// Epochs are unique per backend (each Record and Touch reserves
		// its own), so the need-th oldest is an exact cutoff.
		if c.need >= len(c.epochs) {
			c.cutoff = math.MaxUint64
		} else {
			c.cutoff = nthSmallest(c.epochs, c.need-1)
		}
		c.epochs = nil
	}

	dropped := make([]int64, len(x.byID))
	drop := func(h blockHolder) bool {
		if c := over[h.id]; c != nil && h.epoch <= c.cutoff {
			dropped[h.id]++
			return true
		}
		return false
	}
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.Lock()
		for key, e := range s.blocks {
			s.filter(key, e, drop)
		}
		s.mu.Unlock()
	}
	total := 0
	for id, n := range dropped {
		if n > 0 {
			x.byID[id].blocks.Add(-n)
			total += int(n)
		}
	}
	return total
}

// nthSmallest returns the k-th smallest (from 0) of a, reordering it: a
// quickselect, linear on average where sorting a backend's 100,000 epochs
// was half of an Evict. Its pivot is the median of three; after 64 rounds
// without converging (an input built to defeat it) it sorts what is left.
func nthSmallest(a []uint64, k int) uint64 {
	lo, hi := 0, len(a)-1
	for round := 0; lo < hi; round++ {
		if round == 64 {
			slices.Sort(a[lo : hi+1])
			break
		}
		mid := lo + (hi-lo)/2
		if a[mid] < a[lo] {
			a[mid], a[lo] = a[lo], a[mid]
		}
		if a[hi] < a[lo] {
			a[hi], a[lo] = a[lo], a[hi]
		}
		if a[hi] < a[mid] {
			a[hi], a[mid] = a[mid], a[hi]
		}
		pivot := a[mid]
		// Hoare partition: a[lo..j] ≤ pivot ≤ a[j+1..hi].
		i, j := lo, hi
		for i <= j {
			for a[i] < pivot {
				i++
			}
			for a[j] > pivot {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return a[k] // between j and i: equal to the pivot
		}
	}
	return a[k]
}

// RemoveBlocks drops backend's hold on the blocks of keys and returns how
// many it held: for an engine's report that blocks left its cache. Removing
// a block in the middle of a chain leaves its descendants held, and Match
// (which looks only at the last block of a candidate length) still counts
// them; engines remove the tail first, so this does not happen with their
// events.
func (x *BlockIndex) RemoveBlocks(backend string, keys []uint64) int {
	x.backendsMu.RLock()
	defer x.backendsMu.RUnlock()
	b := x.byName[backend]
	if b == nil {
		return 0
	}
	n := 0
	for _, k := range keys {
		s := x.shard(k)
		s.mu.Lock()
		if e, ok := s.blocks[k]; ok {
			s.filter(k, e, func(h blockHolder) bool {
				if h.id == b.id {
					n++
					return true
				}
				return false
			})
		}
		s.mu.Unlock()
	}
	b.blocks.Add(-int64(n))
	return n
}

// RemoveBackend forgets backend and every block it holds: it left the fleet,
// or its engine emptied its cache. A Record for the same name afterwards
// starts it afresh.
func (x *BlockIndex) RemoveBackend(backend string) {
	// Unlink the name first: once this lock is released no writer holds the
	// old id, and any new Record gets a new one, so the scan below leaves no
	// holding of the old id behind, and the id can then be reused.
	x.backendsMu.Lock()
	b := x.byName[backend]
	if b == nil {
		x.backendsMu.Unlock()
		return
	}
	delete(x.byName, backend)
	x.bindings++
	x.backendsMu.Unlock()

	for i := range x.shards {
		s := &x.shards[i]
		s.mu.Lock()
		for key, e := range s.blocks {
			s.filter(key, e, func(h blockHolder) bool { return h.id == b.id })
		}
		s.mu.Unlock()
	}

	x.backendsMu.Lock()
	b.blocks.Store(0)
	x.byID[b.id] = nil
	x.freeIDs = append(x.freeIDs, b.id)
	x.backendsMu.Unlock()
}

// filter removes from key's holders (e is its entry) those drop reports,
// asking once per holder, and deletes the block when none is left; s.mu is
// held for writing.
func (s *blockShard) filter(key uint64, e blockEntry, drop func(blockHolder) bool) {
	var rest []blockHolder
	if e.more != 0 {
		rest = s.more[e.more-1]
	}
	keep := rest[:0]
	for _, h := range rest {
		if !drop(h) {
			keep = append(keep, h)
		}
	}
	changed := len(keep) != len(rest)
	if drop(blockHolder{epoch: e.epoch, id: e.id}) {
		if len(keep) == 0 {
			if e.more != 0 {
				s.releaseMore(e.more)
			}
			delete(s.blocks, key)
			return
		}
		last := keep[len(keep)-1]
		e.epoch, e.id = last.epoch, last.id
		keep = keep[:len(keep)-1]
		changed = true
	}
	if !changed {
		return
	}
	if e.more != 0 {
		if len(keep) == 0 {
			s.releaseMore(e.more)
			e.more = 0
		} else {
			s.more[e.more-1] = keep
		}
	}
	s.blocks[key] = e
}

// releaseMore returns overflow list ref (1-based) to the free list, keeping
// its array for the next shared block.
func (s *blockShard) releaseMore(ref uint32) {
	s.more[ref-1] = s.more[ref-1][:0]
	s.freeMore = append(s.freeMore, ref-1)
}

// BlockIndexStats describes a BlockIndex's size.
type BlockIndexStats struct {
	// Blocks is the number of distinct block keys held by any backend.
	Blocks int
	// Entries is the number of (block, backend) holdings: the sum of
	// BackendBlocks. Entries ≥ Blocks; the difference is sharing.
	Entries int
	// Backends is the number of backends known.
	Backends int
	// BackendBlocks is each backend's blocks.
	BackendBlocks map[string]int
	// Bytes approximates the index's heap: the table at its typical load
	// (Go maps keep their size after deletions, so this is a floor after
	// heavy eviction) plus the overflow lists. BenchmarkBlockIndexBytes
	// compares it with the heap the runtime reports.
	Bytes int
}

// Approximate heap cost of one block in a shard's table: a Go map slot is the
// 8-byte key, the 16-byte entry and a control byte; tables run between 7/16
// and 7/8 full, about 2/3 on average.
const blockSlotBytes = (8 + 16 + 1) * 3 / 2

// Stats returns the index's counters. It visits every shard (under its read
// lock, one at a time) but not every block.
func (x *BlockIndex) Stats() BlockIndexStats {
	st := BlockIndexStats{BackendBlocks: map[string]int{}}
	x.backendsMu.RLock()
	for name, b := range x.byName {
		n := int(b.blocks.Load())
		st.BackendBlocks[name] = n
		st.Entries += n
	}
	st.Backends = len(x.byName)
	st.Bytes = len(x.byID)*8 + len(x.byName)*(16+8+48)
	x.backendsMu.RUnlock()
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.RLock()
		st.Blocks += len(s.blocks)
		st.Bytes += len(s.blocks)*blockSlotBytes + len(s.more)*24 + len(s.freeMore)*4
		for _, hs := range s.more {
			st.Bytes += cap(hs) * 16
		}
		s.mu.RUnlock()
	}
	return st
}

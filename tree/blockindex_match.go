package tree

// Match returns, for each of backends, the number of leading blocks of keys
// it holds, found by SMG's binary search: a backend that does not hold
// block 0 matches nothing; one that does holds [0, n) for the largest n whose
// block n-1 it holds, found in O(log len(keys)) probes. The answer is exact
// when the backend's holdings are prefix-closed (chained keys); with position
// keys it may exceed VerifiedMatch. Match changes nothing: use Touch or
// Record for the backend chosen.
//
// The searches of all backends run together (see split): a probe reads every
// holder of a block at once, so backends that agree share their probes, and
// 256 backends holding the same system prompt cost a few searches, not 256.
func (x *BlockIndex) Match(keys []uint64, backends []string) []int {
	if len(keys) == 0 || len(backends) == 0 {
		return make([]int, len(backends))
	}
	var idStack [32]uint32
	ids := idStack[:0]
	if len(backends) > len(idStack) {
		ids = make([]uint32, 0, len(backends))
	}
	top := uint32(0)
	x.backendsMu.RLock()
	for _, name := range backends {
		var id uint32 // 0: not a backend the index knows
		if b := x.byName[name]; b != nil {
			id = b.id
		}
		ids = append(ids, id)
		top = max(top, id)
	}
	x.backendsMu.RUnlock()
	return x.matchIDs(keys, ids, top)
}

// MatchAmong is Match for the backends named by r, by position. The names
// are resolved to the index's ids once, and again only after a backend is
// added or removed, instead of once per name per request: at 4,000
// candidates those lookups were a sixth of a selection.
func (x *BlockIndex) MatchAmong(keys []uint64, r *Roster) []int {
	if len(keys) == 0 || r.Len() == 0 {
		return make([]int, r.Len())
	}
	x.backendsMu.RLock()
	res := x.resolve(r)
	x.backendsMu.RUnlock()
	return x.matchIDs(keys, res.backendIDs, res.top)
}

// resolve returns r resolved against the index's current backends; the
// caller holds backendsMu (bindings change only under its write lock).
func (x *BlockIndex) resolve(r *Roster) *rosterIDs {
	if res := r.res.Load(); res != nil && res.owner == x && res.bindings == x.bindings {
		return res
	}
	res := &rosterIDs{owner: x, bindings: x.bindings, backendIDs: make([]uint32, len(r.names))}
	for i, name := range r.names {
		if b := x.byName[name]; b != nil {
			res.backendIDs[i] = b.id
			res.top = max(res.top, b.id)
		}
	}
	r.res.Store(res)
	return res
}

// matchIDs is Match for backends given by id (0 for one the index does not
// know), top the largest of them. ids is not modified.
func (x *BlockIndex) matchIDs(keys []uint64, ids []uint32, top uint32) []int {
	out := make([]int, len(ids))
	var markStack [64]bool
	mark := markStack[:0]
	if int(top) >= len(markStack) {
		mark = make([]bool, top+1)
	} else {
		mark = markStack[:top+1]
	}
	// Block 0 is the chat template's header in nearly every prompt, so
	// every backend that served anything holds it: its holders are marked
	// once and each backend looked up in the marks, where asking the
	// block about each backend would cost backends × holders.
	var candStack [32]int32
	cands := candStack[:0]
	if len(ids) > len(candStack) {
		cands = make([]int32, 0, len(ids))
	}
	s := x.shard(keys[0])
	s.mu.RLock()
	s.mark(keys[0], mark, true)
	for i, id := range ids {
		if id != 0 && mark[id] {
			cands = append(cands, int32(i))
		}
	}
	s.mark(keys[0], mark, false)
	s.mu.RUnlock()
	if len(cands) == 0 {
		return out
	}
	x.split(keys, ids, cands, 1, len(keys), out, mark)
	return out
}

// split runs SMG's binary search for every backend of cands (positions
// in ids) at once. Each holds blocks [0, lo) by the search so far and at most
// hi; the probe of block mid-1 divides them into those holding it, whose
// search goes on in [mid, hi], and the others, in [lo, mid-1]: for each
// backend the probes are exactly those of its own binary search. The
// recursion is at most log2(len(keys)) deep. mark is scratch indexed by
// backend id, all false between calls.
func (x *BlockIndex) split(keys []uint64, ids []uint32, cands []int32, lo, hi int, out []int, mark []bool) {
	for len(cands) > 0 {
		if lo >= hi {
			for _, c := range cands {
				out[c] = lo
			}
			return
		}
		mid := lo + (hi-lo+1)/2
		key := keys[mid-1]
		s := x.shard(key)
		s.mu.RLock()
		s.mark(key, mark, true)
		held := 0 // cands[:held] hold the block
		for i, c := range cands {
			if mark[ids[c]] {
				cands[held], cands[i] = cands[i], cands[held]
				held++
			}
		}
		s.mark(key, mark, false)
		s.mu.RUnlock()
		x.split(keys, ids, cands[:held], mid, hi, out, mark)
		cands, hi = cands[held:], mid-1
	}
}

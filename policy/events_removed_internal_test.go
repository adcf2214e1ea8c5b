package policy

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// homedKey returns the j-th key whose home slot is home: keys are mixed by
// multiplying with the odd pageMix, so dividing (multiplying by its inverse
// mod 2^64) picks a key for any mixed value.
func homedKey(home, j uint64) uint64 {
	inv := uint64(pageMix) // Newton's iteration for the inverse mod 2^64
	for range 6 {
		inv *= 2 - pageMix*inv
	}
	return (home<<(64-pageSlotBits) | j) * inv
}

func TestPageNumsHomedKey(t *testing.T) {
	for _, home := range []uint64{0, 1, pageSlots - 1} {
		for j := range uint64(3) {
			if got := pageHome(homedKey(home, j)); got != home {
				t.Fatalf("homedKey(%d, %d) lands at %d", home, j, got)
			}
		}
	}
}

// TestPageNums drives the table through runs of keys sharing a home
// (including runs that wrap past the last slot) and checks every key after
// each step against a map: deleting from the middle of a run must keep the
// keys after it reachable.
func TestPageNums(t *testing.T) {
	last := uint64(pageSlots - 1)
	tests := []struct {
		name string
		ops  []pageOp // applied in order
	}{
		{"put then get", []pageOp{{put, homedKey(5, 0), 1}}},
		{"put replaces the number", []pageOp{{put, homedKey(5, 0), 1}, {put, homedKey(5, 0), 7}}},
		{"delete a key never put", []pageOp{{put, homedKey(5, 0), 1}, {del, homedKey(5, 1), 0}}},
		{"a stale number deletes nothing", []pageOp{{put, homedKey(5, 0), 1}, {put, homedKey(5, 0), 2}, {stale, homedKey(5, 0), 1}}},
		{"delete the head of a run", []pageOp{
			{put, homedKey(5, 0), 1}, {put, homedKey(5, 1), 2}, {put, homedKey(5, 2), 3}, {del, homedKey(5, 0), 0}}},
		{"delete the middle of a run", []pageOp{
			{put, homedKey(5, 0), 1}, {put, homedKey(5, 1), 2}, {put, homedKey(5, 2), 3}, {del, homedKey(5, 1), 0}}},
		{"a run of two homes, the first deleted", []pageOp{
			{put, homedKey(5, 0), 1}, {put, homedKey(6, 0), 2}, {put, homedKey(5, 1), 3}, {put, homedKey(6, 1), 4},
			{del, homedKey(5, 0), 0}, {del, homedKey(6, 0), 0}}},
		{"an entry at its home stays put", []pageOp{
			{put, homedKey(5, 0), 1}, {put, homedKey(5, 1), 2}, {put, homedKey(7, 0), 3}, {del, homedKey(5, 0), 0}}},
		{"a run wrapping past the last slot", []pageOp{
			{put, homedKey(last, 0), 1}, {put, homedKey(last, 1), 2}, {put, homedKey(0, 0), 3}, {put, homedKey(last, 2), 4},
			{del, homedKey(last, 0), 0}, {del, homedKey(0, 0), 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tab pageNums
			want := map[uint64]uint64{}
			for step, op := range tt.ops {
				op.apply(&tab, want)
				checkPageNums(t, step, &tab, want, tt.ops)
			}
		})
	}
}

// TestPageNumsChurn churns the table as removals does (a ring of
// removalsPerWorker keys, each overwritten in turn) with keys crowded into
// a few homes, against a map.
func TestPageNumsChurn(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tab pageNums
	want := map[uint64]uint64{}
	var ring [removalsPerWorker]uint64
	for n := uint64(1); n <= 20*removalsPerWorker; n++ {
		i := n % removalsPerWorker
		if old := ring[i]; old != 0 {
			tab.delIf(old, want[old])
			delete(want, old)
		}
		k := homedKey(rng.Uint64N(pageSlots/4), rng.Uint64N(1<<20)+1) // homes in a quarter of the table
		if want[k] != 0 {
			continue
		}
		ring[i] = k
		tab.put(k, n)
		want[k] = n
		if n%997 == 0 {
			checkPageNums(t, int(n), &tab, want, nil)
		}
	}
	checkPageNums(t, -1, &tab, want, nil)
}

type pageOpKind int

const (
	put   pageOpKind = iota
	del              // delIf with the key's number
	stale            // delIf with another number: nothing changes
)

type pageOp struct {
	kind pageOpKind
	key  uint64
	num  uint64
}

func (op pageOp) apply(tab *pageNums, want map[uint64]uint64) {
	switch op.kind {
	case put:
		tab.put(op.key, op.num)
		want[op.key] = op.num
	case del:
		tab.delIf(op.key, want[op.key])
		delete(want, op.key)
	case stale:
		tab.delIf(op.key, op.num)
	}
}

func checkPageNums(t *testing.T, step int, tab *pageNums, want map[uint64]uint64, ops []pageOp) {
	t.Helper()
	for k, n := range want {
		if got := tab.get(k); got != n {
			t.Fatalf("after step %d: get(%#x) = %d, want %d (ops %v)", step, k, got, n, ops)
		}
	}
	for _, op := range ops {
		if _, ok := want[op.key]; !ok && tab.get(op.key) != 0 {
			t.Fatalf("after step %d: get(%#x) = %d after its delete", step, op.key, tab.get(op.key))
		}
	}
	if got := tab.len(); got != len(want) {
		t.Fatalf("after step %d: %d keys in the table, want %d", step, got, len(want))
	}
}

// TestHashPageEveryToken: a page's hash depends on every token, at every
// position, whatever the page's length (odd lengths and the lanes' tails
// included), and on the order of the tokens.
func TestHashPageEveryToken(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 32} {
		page := make([]uint32, n)
		for i := range page {
			page[i] = uint32(1000 + i)
		}
		base := hashPage(page)
		for i := range page {
			for _, v := range []uint32{page[i] ^ 1, page[i] ^ 1<<31, 0} {
				q := slices.Clone(page)
				q[i] = v
				if hashPage(q) == base {
					t.Errorf("%d tokens: changing token %d to %d leaves the hash", n, i, v)
				}
			}
		}
		if n > 1 {
			q := slices.Clone(page)
			q[0], q[n-1] = q[n-1], q[0]
			if hashPage(q) == base {
				t.Errorf("%d tokens: swapping the first and last tokens leaves the hash", n)
			}
		}
	}
}

// TestRemovalsByFirstPage: remembering each removal by its first page cuts
// an outcome where remembering every removed page would, on paths that
// branch and removals of their tails at any depth, interleaved with
// decisions. Token ids are drawn so that no page repeats under another
// prefix (the one case where the two differ: there every page
// remembered cut more).
func TestRemovalsByFirstPage(t *testing.T) {
	const ps = 4
	rng := rand.New(rand.NewPCG(7, 8))
	next := uint32(1)
	fresh := func(pages int) []uint32 {
		s := make([]uint32, pages*ps)
		for i := range s {
			s[i] = next
			next++
		}
		return s
	}
	// Paths branch off one another at page boundaries.
	paths := [][]uint32{fresh(12), fresh(12)}
	for range 30 {
		base := paths[rng.IntN(len(paths))]
		cut := rng.IntN(len(base)/ps) * ps
		paths = append(paths, append(slices.Clip(base[:cut]), fresh(1+rng.IntN(8))...))
	}

	r := newRemovals(ps)
	every := map[uint64]uint64{} // every removed page's key → its latest removal
	var decisions []uint64
	for range 2000 {
		if rng.IntN(10) == 0 {
			decisions = append(decisions, r.now())
		}
		p := paths[rng.IntN(len(paths))]
		end := 1 + rng.IntN(len(p)/ps)
		pages := 1 + rng.IntN(end)
		path := p[:end*ps]
		r.removed("w", path, pages)
		n := r.now()
		for i := end - pages; i < end; i++ {
			every[pageKey(i, path[i*ps:(i+1)*ps])] = n
		}
	}
	cutEvery := func(decision uint64, seq []uint32) int {
		for i := 0; (i+1)*ps <= len(seq); i++ {
			if every[pageKey(i, seq[i*ps:(i+1)*ps])] > decision {
				return i * ps
			}
		}
		return len(seq) / ps * ps
	}
	checked, cuts := 0, 0
	for _, d := range decisions {
		for _, p := range paths {
			// An outcome on the path: a prompt of some of its tokens (not
			// always whole pages), the reply the rest, and a page past it.
			split := rng.IntN(len(p) + 1)
			prompt, reply := p[:split], append(slices.Clip(p[split:]), fresh(1)...)
			got, want := r.cut("w", d, prompt, reply), cutEvery(d, append(slices.Clip(prompt), reply...))
			if got != want {
				t.Fatalf("decision %d, outcome of %d+%d tokens: cut at %d, every page remembered cuts at %d", d, len(prompt), len(reply), got, want)
			}
			checked++
			if want < len(p) {
				cuts++
			}
		}
	}
	if cuts == 0 || cuts == checked {
		t.Fatalf("%d of %d outcomes cut: the test exercises nothing", cuts, checked)
	}
}

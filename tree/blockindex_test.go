package tree_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/kvgate/kvgate/tree"
)

// blk returns block c of size bs: bs token ids no other c shares.
func blk(c, bs int) []uint32 {
	ids := make([]uint32, bs)
	for i := range ids {
		ids[i] = uint32(c*1000 + i + 1)
	}
	return ids
}

// blocks concatenates blocks of size bs by content id.
func blocks(bs int, cs ...int) []uint32 {
	var ids []uint32
	for _, c := range cs {
		ids = append(ids, blk(c, bs)...)
	}
	return ids
}

func TestNewBlockIndexValidates(t *testing.T) {
	for _, tc := range []struct {
		cfg  tree.BlockIndexConfig
		want string // "" if valid
	}{
		{tree.BlockIndexConfig{BlockSize: 16, MaxBlocksPerBackend: 1}, ""},
		{tree.BlockIndexConfig{BlockSize: 1, MaxBlocksPerBackend: 1, Hash: tree.HashPosition, Shards: 1}, ""},
		{tree.BlockIndexConfig{BlockSize: 0, MaxBlocksPerBackend: 1}, "block size"},
		{tree.BlockIndexConfig{BlockSize: 16, MaxBlocksPerBackend: 0}, "max blocks"},
		{tree.BlockIndexConfig{BlockSize: 16, MaxBlocksPerBackend: 1, Hash: "sha"}, "block hash"},
		{tree.BlockIndexConfig{BlockSize: 16, MaxBlocksPerBackend: 1, Shards: 3}, "shards"},
		{tree.BlockIndexConfig{BlockSize: 16, MaxBlocksPerBackend: 1, Shards: -1}, "shards"},
	} {
		_, err := tree.NewBlockIndex(tc.cfg)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("NewBlockIndex(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestBlockIndexKeys is the key format: whole blocks only; position keys
// are xxh3(little-endian position ‖ little-endian tokens) (SMG's §7.1);
// chained keys are xxh3(previous key ‖ tokens), so a key names the prefix.
func TestBlockIndexKeys(t *testing.T) {
	const bs = 4
	pos := mustBlockIndex(t, tree.BlockIndexConfig{BlockSize: bs, MaxBlocksPerBackend: 10, Hash: tree.HashPosition})
	ch := mustBlockIndex(t, tree.BlockIndexConfig{BlockSize: bs, MaxBlocksPerBackend: 10, Hash: tree.HashChained})
	ac, bc := blocks(bs, 1, 3), blocks(bs, 2, 3)

	for _, tc := range []struct {
		tokens int
		blocks int
	}{{0, 0}, {3, 0}, {4, 1}, {7, 1}, {8, 2}, {9, 2}} {
		if n := len(pos.Keys(ac[:min(tc.tokens, len(ac))])); tc.tokens <= len(ac) && n != tc.blocks {
			t.Errorf("%d tokens: %d keys, want %d", tc.tokens, n, tc.blocks)
		}
	}

	want := func(prefix uint64, block []uint32) uint64 {
		b := binary.LittleEndian.AppendUint64(nil, prefix)
		for _, id := range block {
			b = binary.LittleEndian.AppendUint32(b, id)
		}
		return xxh3.Hash(b)
	}
	pk := pos.Keys(ac)
	if pk[0] != want(0, blk(1, bs)) || pk[1] != want(1, blk(3, bs)) {
		t.Errorf("position keys %x, want xxh3(position ‖ tokens)", pk)
	}
	ck := ch.Keys(ac)
	if ck[1] != want(ck[0], blk(3, bs)) {
		t.Errorf("chained key 1 = %x, want xxh3(key 0 ‖ tokens) = %x", ck[1], want(ck[0], blk(3, bs)))
	}
	if slices.Equal(ck, pk) {
		t.Error("chained and position keys agree")
	}

	// A+C and B+C: position keys share C's; chained keys do not.
	if pos.Keys(ac)[1] != pos.Keys(bc)[1] {
		t.Error("position keys of the same block at the same position differ")
	}
	if ch.Keys(ac)[1] == ch.Keys(bc)[1] {
		t.Error("chained keys of C after A and after B are equal")
	}
	// Keys are a pure function of the tokens: a second index agrees.
	other := mustBlockIndex(t, tree.BlockIndexConfig{BlockSize: bs, MaxBlocksPerBackend: 1})
	if !slices.Equal(other.Keys(ac), ck) {
		t.Error("two chained indexes disagree on a prompt's keys")
	}
}

// TestBlockIndexKeysJoined: the keys of a prompt followed by its reply are
// those of the two joined, wherever the prompt ends in a block (a reply
// starts mid-block as often as not), in both key variants.
func TestBlockIndexKeysJoined(t *testing.T) {
	const bs = 4
	seq := blocks(bs, 1, 2, 3)
	seq = append(seq, 7, 8) // and a partial block, which has no key
	for _, hash := range []string{tree.HashChained, tree.HashPosition} {
		x := mustBlockIndex(t, tree.BlockIndexConfig{BlockSize: bs, MaxBlocksPerBackend: 10, Hash: hash})
		want := x.Keys(seq)
		for cut := 0; cut <= len(seq); cut++ {
			if got := x.KeysJoined(seq[:cut], seq[cut:]); !slices.Equal(got, want) {
				t.Errorf("%s: KeysJoined split at %d = %x, want Keys of the whole = %x", hash, cut, got, want)
			}
		}
	}
}

// TestBlockIndexMatch is Match's specification on small cases: whole blocks,
// per backend, from block 0.
func TestBlockIndexMatch(t *testing.T) {
	const bs = 4
	for _, hash := range []string{tree.HashChained, tree.HashPosition} {
		for _, tc := range []struct {
			name     string
			recorded map[string][]uint32
			query    []uint32
			want     []int // for w0, w1, unknown
		}{
			{"nothing recorded", nil, blocks(bs, 1, 2), []int{0, 0, 0}},
			{"exact repeat", map[string][]uint32{"w0": blocks(bs, 1, 2, 3)}, blocks(bs, 1, 2, 3), []int{3, 0, 0}},
			{"partial last block ignored", map[string][]uint32{"w0": blocks(bs, 1, 2)}, append(blocks(bs, 1, 2), 7, 7), []int{2, 0, 0}},
			{"longer query", map[string][]uint32{"w0": blocks(bs, 1, 2)}, blocks(bs, 1, 2, 3, 4, 5), []int{2, 0, 0}},
			{"shorter query", map[string][]uint32{"w0": blocks(bs, 1, 2, 3, 4)}, blocks(bs, 1, 2), []int{2, 0, 0}},
			{"diverges at block 1", map[string][]uint32{"w0": blocks(bs, 1, 2, 3)}, blocks(bs, 1, 9, 3), []int{1, 0, 0}},
			{"block 0 differs", map[string][]uint32{"w0": blocks(bs, 1, 2, 3)}, blocks(bs, 9, 2, 3), []int{0, 0, 0}},
			{"two backends", map[string][]uint32{"w0": blocks(bs, 1, 2), "w1": blocks(bs, 1, 2, 3, 4)}, blocks(bs, 1, 2, 3, 4, 5, 6, 7), []int{2, 4, 0}},
		} {
			t.Run(hash+"/"+tc.name, func(t *testing.T) {
				x := mustBlockIndex(t, tree.BlockIndexConfig{BlockSize: bs, MaxBlocksPerBackend: 100, Hash: hash})
				for b, ids := range tc.recorded {
					x.Record(x.Keys(ids), b)
				}
				if got := x.Match(x.Keys(tc.query), []string{"w0", "w1", "w9"}); !slices.Equal(got, tc.want) {
					t.Fatalf("Match = %v, want %v", got, tc.want)
				}
			})
		}
	}
}

// TestBlockIndexFalseMatch is the position hash's known weakness, and the
// reason chained keys are the default. w1 served A+Z+C+D and B+X: it holds
// B at position 0 and C, D at positions 2 and 3. Asked for B+Y+C+D,
// SMG's binary search probes block 2 (C: held, so "blocks 0-2 are"), then
// block 3 (D: held), and predicts 4 blocks where w1 holds 1. With chained
// keys C and D after B+Y are other keys than after A+Z: 1 block.
func TestBlockIndexFalseMatch(t *testing.T) {
	const bs = 4
	for _, tc := range []struct {
		hash     string
		match    int
		verified int
	}{
		{tree.HashPosition, 4, 1},
		{tree.HashChained, 1, 1},
	} {
		t.Run(tc.hash, func(t *testing.T) {
			x := mustBlockIndex(t, tree.BlockIndexConfig{BlockSize: bs, MaxBlocksPerBackend: 100, Hash: tc.hash})
			const a, b, c, d, x1, y, z = 1, 2, 3, 4, 5, 6, 7
			x.Record(x.Keys(blocks(bs, a, z, c, d)), "w1")
			x.Record(x.Keys(blocks(bs, b, x1)), "w1")
			keys := x.Keys(blocks(bs, b, y, c, d))
			if got := x.Match(keys, []string{"w1"})[0]; got != tc.match {
				t.Errorf("Match = %d blocks, want %d", got, tc.match)
			}
			if got := x.VerifiedMatch(keys, "w1"); got != tc.verified {
				t.Errorf("VerifiedMatch = %d blocks, want %d", got, tc.verified)
			}
		})
	}
	// Even block-by-block verification cannot see through position keys:
	// w1 holds A+C and B+X, and B+C looks fully held, though w1 never saw
	// C after B.
	x := mustBlockIndex(t, tree.BlockIndexConfig{BlockSize: bs, MaxBlocksPerBackend: 100, Hash: tree.HashPosition})
	x.Record(x.Keys(blocks(bs, 1, 3)), "w1")
	x.Record(x.Keys(blocks(bs, 2, 5)), "w1")
	if got := x.VerifiedMatch(x.Keys(blocks(bs, 2, 3)), "w1"); got != 2 {
		t.Errorf("position VerifiedMatch of B+C = %d, want 2 (the collision)", got)
	}
}

// TestBlockIndexEvictionIsLRUPerBackend: each backend keeps its newest
// MaxBlocksPerBackend blocks; among the blocks of one request the deepest
// go first; one backend's use does not protect another's blocks; a Record
// that takes a backend more than a quarter over evicts at once.
func TestBlockIndexEvictionIsLRUPerBackend(t *testing.T) {
	const bs, max = 2, 8 // an eighth of 8 is 1: Record starts an eviction at 10, waits for one at 11
	for _, hash := range []string{tree.HashChained, tree.HashPosition} {
		t.Run(hash, func(t *testing.T) {
			x := mustBlockIndex(t, tree.BlockIndexConfig{BlockSize: bs, MaxBlocksPerBackend: max, Hash: hash})
			old, shared, fresh := blocks(bs, 1, 2, 3, 4, 5, 6), blocks(bs, 7, 8, 9), blocks(bs, 10, 11, 12)
			x.Record(x.Keys(old), "w0")    // 6 blocks, the oldest
			x.Record(x.Keys(shared), "w0") // 9 blocks: one over, within the slack
			x.Record(x.Keys(shared), "w1") // w1's copy is newer; w0's is not
			x.Touch(x.Keys(old)[:1], "w0") // old's block 0 is used again
			if got := x.Stats().BackendBlocks["w0"]; got != 9 {
				t.Fatalf("before Evict w0 holds %d blocks, want 9", got)
			}
			if n := x.Evict(); n != 1 {
				t.Fatalf("Evict dropped %d holdings, want 1", n)
			}
			// Gone: old's deepest block, the oldest of its request.
			if got := x.VerifiedMatch(x.Keys(old), "w0"); got != 5 {
				t.Fatalf("after Evict w0 holds %d blocks of old, want 5", got)
			}
			x.Record(x.Keys(fresh), "w0") // 11 > 8 + 2: evicts to 8 at once
			st := x.Stats()
			if st.BackendBlocks["w0"] != max || st.BackendBlocks["w1"] != 3 {
				t.Fatalf("after an over-budget Record: %v, want w0 %d, w1 3", st.BackendBlocks, max)
			}
			for _, tc := range []struct {
				name    string
				ids     []uint32
				backend string
				want    int
			}{
				{"fresh, the newest", fresh, "w0", 3},
				{"old: block 0 touched, block 1 newer than 2-4", old, "w0", 2},
				{"shared on w0", shared, "w0", 3},
				{"shared on w1, untouched by w0's eviction", shared, "w1", 3},
			} {
				if got := x.VerifiedMatch(x.Keys(tc.ids), tc.backend); got != tc.want {
					t.Errorf("%s: %d blocks held, want %d", tc.name, got, tc.want)
				}
			}
		})
	}
}

// TestBlockIndexBoundedAtAllTimes: however fast records come, no backend is
// ever more than a quarter over its budget, without a call to Evict.
func TestBlockIndexBoundedAtAllTimes(t *testing.T) {
	const bs, max = 4, 64
	x := mustBlockIndex(t, tree.BlockIndexConfig{BlockSize: bs, MaxBlocksPerBackend: max})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		ids := make([]uint32, bs*(1+rng.IntN(20)))
		for j := range ids {
			ids[j] = rng.Uint32()
		}
		b := fmt.Sprint("w", i%3)
		x.Record(x.Keys(ids), b)
		if n := x.Stats().BackendBlocks[b]; n > max+max/4 {
			t.Fatalf("record %d: %s holds %d blocks, over %d", i, b, n, max+max/4)
		}
	}
}

func TestBlockIndexRemoveBackendAndBlocks(t *testing.T) {
	const bs = 4
	x := mustBlockIndex(t, tree.BlockIndexConfig{BlockSize: bs, MaxBlocksPerBackend: 100})
	p := x.Keys(blocks(bs, 1, 2, 3, 4))
	x.Record(p, "w0")
	x.Record(p, "w1")

	// An engine reports its last two blocks gone: the match shortens.
	if n := x.RemoveBlocks("w0", p[2:]); n != 2 {
		t.Fatalf("RemoveBlocks = %d, want 2", n)
	}
	if n := x.RemoveBlocks("w0", p[2:]); n != 0 {
		t.Fatalf("RemoveBlocks again = %d, want 0", n)
	}
	if got := x.Match(p, []string{"w0", "w1"}); !slices.Equal(got, []int{2, 4}) {
		t.Fatalf("after RemoveBlocks: %v, want [2 4]", got)
	}

	// A backend that leaves takes its blocks; its id is reused by the next
	// backend without inheriting anything.
	x.RemoveBackend("w1")
	st := x.Stats()
	if st.Backends != 1 || st.Blocks != 2 || st.Entries != 2 {
		t.Fatalf("after RemoveBackend: %+v, want 1 backend, 2 blocks, 2 entries", st)
	}
	x.Record(x.Keys(blocks(bs, 9)), "w2")
	if got := x.Match(p, []string{"w0", "w1", "w2"}); !slices.Equal(got, []int{2, 0, 0}) {
		t.Fatalf("after a new backend: %v, want [2 0 0]", got)
	}
	x.RemoveBackend("w9") // unknown: nothing happens
	x.RemoveBackend("w0")
	x.RemoveBackend("w2")
	if st := x.Stats(); st.Blocks != 0 || st.Entries != 0 || st.Backends != 0 {
		t.Fatalf("empty index: %+v", st)
	}
}

// TestBlockIndexMidChainRemoval documents the binary search's assumption:
// remove a block in the middle of what a backend holds and Match, which
// looks only at the last block of each length it tries, still counts the
// blocks beyond it; VerifiedMatch does not. Engines remove tails first.
func TestBlockIndexMidChainRemoval(t *testing.T) {
	const bs = 4
	x := mustBlockIndex(t, tree.BlockIndexConfig{BlockSize: bs, MaxBlocksPerBackend: 100})
	p := x.Keys(blocks(bs, 1, 2, 3, 4))
	x.Record(p, "w0")
	x.RemoveBlocks("w0", p[1:2])
	if m, v := x.Match(p, []string{"w0"})[0], x.VerifiedMatch(p, "w0"); m != 4 || v != 1 {
		t.Fatalf("Match %d, VerifiedMatch %d; want 4 and 1", m, v)
	}
}

// TestBlockIndexSharedBlocks: blocks several backends hold (a system
// prompt) keep each holder's own epoch and survive the removal of any one.
func TestBlockIndexSharedBlocks(t *testing.T) {
	const bs = 4
	x := mustBlockIndex(t, tree.BlockIndexConfig{BlockSize: bs, MaxBlocksPerBackend: 100, Shards: 1})
	sys := x.Keys(blocks(bs, 1, 2))
	names := []string{"a", "b", "c", "d", "e"}
	for _, b := range names {
		x.Record(sys, b)
	}
	if st := x.Stats(); st.Blocks != 2 || st.Entries != 10 {
		t.Fatalf("5 backends × 2 shared blocks: %+v", st)
	}
	for _, gone := range []string{"a", "c", "e"} {
		x.RemoveBlocks(gone, sys)
	}
	if got := x.Match(sys, names); !slices.Equal(got, []int{0, 2, 0, 2, 0}) {
		t.Fatalf("after removing a, c, e: %v", got)
	}
	x.RemoveBackend("b")
	x.Record(sys, "f")
	if got := x.Match(sys, []string{"b", "d", "f"}); !slices.Equal(got, []int{0, 2, 2}) {
		t.Fatalf("after b left and f came: %v", got)
	}
}

// TestBlockIndexMatchManyBackends is Match over fleets larger than its
// stack scratch, every backend holding the first block (a chat template's
// header) and some holding more: each answer is what VerifiedMatch counts,
// unknown backends and repeated names included.
func TestBlockIndexMatchManyBackends(t *testing.T) {
	const bs = 4
	for _, n := range []int{1, 31, 33, 64, 65, 300} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			x := mustBlockIndex(t, tree.BlockIndexConfig{BlockSize: bs, MaxBlocksPerBackend: 100})
			prompt := x.Keys(blocks(bs, 1, 2, 3, 4, 5, 6))
			var names []string
			for i := range n {
				name := fmt.Sprintf("w%d", i)
				names = append(names, name)
				x.Record(prompt[:1+i%len(prompt)], name)
			}
			names = append(names, "unknown", names[0])
			got := x.Match(prompt, names)
			for i, name := range names {
				if want := x.VerifiedMatch(prompt, name); got[i] != want {
					t.Errorf("%s: Match %d, VerifiedMatch %d", name, got[i], want)
				}
			}
		})
	}
}

// TestBlockIndexMatchAmong: a roster's matches are Match's for the same
// names, through backends added, removed, and a new one taking a freed id.
func TestBlockIndexMatchAmong(t *testing.T) {
	const bs = 4
	x := mustBlockIndex(t, tree.BlockIndexConfig{BlockSize: bs, MaxBlocksPerBackend: 100})
	names := []string{"a", "b", "never", "d"}
	r := tree.NewRoster(names)
	prompt := x.Keys(blocks(bs, 1, 2, 3, 4))
	steps := []struct {
		name string
		do   func()
	}{
		{"empty", func() {}},
		{"a, b and c record", func() {
			x.Record(prompt, "a")
			x.Record(prompt[:2], "b")
			x.Record(prompt[:3], "c")
		}},
		{"d records", func() { x.Record(prompt[:1], "d") }},
		{"a removed", func() { x.RemoveBackend("a") }},
		{"e takes a freed id", func() { x.Record(prompt, "e") }},
		{"a back", func() { x.Record(prompt[:3], "a") }},
	}
	for _, st := range steps {
		st.do()
		if got, want := x.MatchAmong(prompt, r), x.Match(prompt, names); !slices.Equal(got, want) {
			t.Errorf("%s: MatchAmong %v, Match %v", st.name, got, want)
		}
	}
	if got := x.MatchAmong(nil, r); !slices.Equal(got, make([]int, len(names))) {
		t.Errorf("no keys: %v", got)
	}
}

// TestBlockIndexConcurrent runs records, matches, touches, removals and
// evictions at once; with -race it checks the locking, and afterwards that
// the counts agree with the table.
func TestBlockIndexConcurrent(t *testing.T) {
	const bs = 4
	for _, shards := range []int{1, 8} {
		x := mustBlockIndex(t, tree.BlockIndexConfig{BlockSize: bs, MaxBlocksPerBackend: 200, Shards: shards})
		backends := []string{"w0", "w1", "w2", "w3"}
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 9))
				for range 1500 {
					keys := x.Keys(blockPrompt(rng, 1+rng.IntN(30), bs))
					b := backends[rng.IntN(len(backends))]
					switch op := rng.IntN(100); {
					case op < 50:
						x.Record(keys, b)
					case op < 80:
						m := x.Match(keys, backends)
						x.Touch(keys[:slices.Max(m)], b)
					case op < 92:
						x.RemoveBlocks(b, keys[len(keys)/2:])
					case op < 97:
						x.Evict()
					default:
						x.RemoveBackend(b)
					}
				}
			})
		}
		wg.Wait()
		x.Evict()
		st := x.Stats()
		total := 0
		for _, b := range backends {
			n := st.BackendBlocks[b]
			if n < 0 || n > 200 {
				t.Errorf("shards %d: %s holds %d blocks after Evict", shards, b, n)
			}
			total += n
		}
		if total != st.Entries || st.Blocks > st.Entries {
			t.Errorf("shards %d: counts %v (entries %d, blocks %d) disagree", shards, st.BackendBlocks, st.Entries, st.Blocks)
		}
	}
}

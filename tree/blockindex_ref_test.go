package tree_test

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/tree"
)

// blockRef is the brute-force model of a BlockIndex: per backend, the keys it
// holds with the logical time each was last used. Time runs as the index's
// epochs do: an operation on n blocks advances it by n and gives block i the
// time top-i, so a request's deeper blocks are older than its shallower ones.
type blockRef struct {
	max   int
	clock uint64
	held  map[string]map[uint64]uint64
}

func newBlockRef(max int) *blockRef {
	return &blockRef{max: max, held: map[string]map[uint64]uint64{}}
}

func (r *blockRef) record(keys []uint64, b string) {
	if len(keys) == 0 {
		return
	}
	r.clock += uint64(len(keys))
	if r.held[b] == nil {
		r.held[b] = map[uint64]uint64{}
	}
	for i, k := range keys {
		r.held[b][k] = r.clock - uint64(i)
	}
	// The index bounds a backend at all times: more than a quarter over
	// the budget, a Record evicts every backend back to it.
	if len(r.held[b]) > r.max+2*(r.max/8) {
		r.evict()
	}
}

// background reports whether the last record took b more than an eighth
// over the budget: the index has then started an eviction, which the test
// lets finish (Evict waits for it) and mirrors.
func (r *blockRef) background(b string) bool { return len(r.held[b]) > r.max+r.max/8 }

func (r *blockRef) touch(keys []uint64, b string) {
	if len(keys) == 0 || r.held[b] == nil {
		return
	}
	r.clock += uint64(len(keys))
	for i, k := range keys {
		if _, ok := r.held[b][k]; ok {
			r.held[b][k] = r.clock - uint64(i)
		}
	}
}

// evict keeps each backend's newest max keys.
func (r *blockRef) evict() {
	for _, h := range r.held {
		if len(h) <= r.max {
			continue
		}
		keys := slices.SortedFunc(maps.Keys(h), func(a, b uint64) int { return int64Cmp(h[a], h[b]) })
		for _, k := range keys[:len(keys)-r.max] {
			delete(h, k)
		}
	}
}

func int64Cmp(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (r *blockRef) remove(keys []uint64, b string) int {
	n := 0
	for _, k := range keys {
		if _, ok := r.held[b][k]; ok {
			delete(r.held[b], k)
			n++
		}
	}
	return n
}

func (r *blockRef) has(k uint64, b string) bool {
	_, ok := r.held[b][k]
	return ok
}

// contiguous is the longest prefix of keys b holds, checked block by block.
func (r *blockRef) contiguous(keys []uint64, b string) int {
	n := 0
	for n < len(keys) && r.has(keys[n], b) {
		n++
	}
	return n
}

// binarySearch is SMG's §7.3 over the model: no block 0, no match;
// otherwise the largest n found by bisecting on "holds block n-1".
func (r *blockRef) binarySearch(keys []uint64, b string) int {
	if len(keys) == 0 || !r.has(keys[0], b) {
		return 0
	}
	lo, hi := 1, len(keys)
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if r.has(keys[mid-1], b) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// blockPrompt builds a prompt of n blocks of size bs whose block i is one of
// four contents, chosen by rng: with so few choices, prompts share prefixes
// and, after diverging, share blocks at the same position again, the case
// where position keys collide.
func blockPrompt(rng *rand.Rand, n, bs int) []uint32 {
	ids := make([]uint32, 0, n*bs+bs-1)
	for range n {
		c := uint32(rng.IntN(4))
		for j := range bs {
			ids = append(ids, c*1000+uint32(j))
		}
	}
	// A partial last block, which never counts.
	for j := range rng.IntN(bs) {
		ids = append(ids, 9000+uint32(j))
	}
	return ids
}

// checkAgainstRef compares every backend's count and the matches of the
// probe prompts with the model, and, if all, every holding. It returns how
// many matches exceeded the backend's contiguous holding.
func checkAgainstRef(t *testing.T, step string, x *tree.BlockIndex, r *blockRef, backends []string, universe map[uint64]bool, probes [][]uint64, closed, all bool) (over int) {
	t.Helper()
	st := x.Stats()
	for _, b := range backends {
		if got, want := st.BackendBlocks[b], len(r.held[b]); got != want {
			t.Fatalf("%s: %s holds %d blocks, model %d", step, b, got, want)
		}
		for k := range universe {
			if !all {
				break
			}
			if got, want := x.VerifiedMatch([]uint64{k}, b) == 1, r.has(k, b); got != want {
				t.Fatalf("%s: %s holds %016x: %v, model %v", step, b, k, got, want)
			}
		}
	}
	for _, keys := range probes {
		got := x.Match(keys, backends)
		for i, b := range backends {
			if want := r.binarySearch(keys, b); got[i] != want {
				t.Fatalf("%s: Match for %s = %d, SMG's binary search over the model %d", step, b, got[i], want)
			}
			contiguous := r.contiguous(keys, b)
			if v := x.VerifiedMatch(keys, b); v != contiguous {
				t.Fatalf("%s: VerifiedMatch for %s = %d, model %d", step, b, v, contiguous)
			}
			if closed && got[i] != contiguous {
				t.Fatalf("%s: chained Match for %s = %d, but it holds %d contiguous blocks", step, b, got[i], contiguous)
			}
			if got[i] > contiguous {
				over++
			}
		}
	}
	return over
}

// TestBlockIndexAgainstReference runs random records, touches, evictions,
// tail removals and backend removals on an index and the model, and checks
// after each step that both hold the same blocks, that Match is SMG's
// binary search, and, for chained keys, that it equals the longest
// contiguous match: chained keys and tail-first eviction keep every
// backend's holdings prefix-closed. Mid-chain removals are checked
// separately (TestBlockIndexMidChainRemoval).
func TestBlockIndexAgainstReference(t *testing.T) {
	const bs = 4
	for _, hash := range []string{tree.HashChained, tree.HashPosition} {
		for seed := range uint64(6) {
			t.Run(hash, func(t *testing.T) {
				max := 10 + int(seed)*7
				x := mustBlockIndex(t, tree.BlockIndexConfig{BlockSize: bs, MaxBlocksPerBackend: max, Hash: hash, Shards: 1 << (seed % 4)})
				r := newBlockRef(max)
				rng := rand.New(rand.NewPCG(seed, 77))
				backends := []string{"w0", "w1", "w2", "w3"}
				universe := map[uint64]bool{}
				var recorded [][]uint64
				overpredicted, dropped := 0, 0
				var probes [][]uint64
				for range 30 {
					keys := x.Keys(blockPrompt(rng, 1+rng.IntN(12), bs))
					probes = append(probes, keys)
				}
				for step := range 600 {
					b := backends[rng.IntN(len(backends))]
					keys := x.Keys(blockPrompt(rng, rng.IntN(14), bs))
					for _, k := range keys {
						universe[k] = true
					}
					name := ""
					switch op := rng.IntN(100); {
					case op < 55:
						name = "record"
						x.Record(keys, b)
						r.record(keys, b)
						if r.background(b) {
							x.Evict()
							r.evict()
						}
						if len(keys) > 0 {
							recorded = append(recorded, keys)
						}
					case op < 65:
						name = "touch"
						if len(recorded) > 0 {
							keys = recorded[rng.IntN(len(recorded))]
							keys = keys[:rng.IntN(len(keys)+1)]
						}
						x.Touch(keys, b)
						r.touch(keys, b)
					case op < 78:
						name = "evict"
						dropped += x.Evict()
						r.evict()
					case op < 96:
						// The engine dropped the tail of a chain it held
						// as a leaf: remove the last blocks of a recorded
						// prompt only if the backend holds nothing below
						// them, which keeps its holdings prefix-closed.
						name = "remove tail"
						if len(recorded) == 0 {
							continue
						}
						keys = recorded[rng.IntN(len(recorded))]
						tail := keys[len(keys)-min(len(keys), 1+rng.IntN(3)):]
						if hash == tree.HashChained && !leafTail(r, recorded, keys, tail, b) {
							continue
						}
						if hash == tree.HashPosition {
							tail = keys[rng.IntN(len(keys)):] // anything goes
						}
						if got, want := x.RemoveBlocks(b, tail), r.remove(tail, b); got != want {
							t.Fatalf("step %d: RemoveBlocks = %d, model removed %d", step, got, want)
						}
					default:
						name = "remove backend"
						x.RemoveBackend(b)
						delete(r.held, b)
					}
					overpredicted += checkAgainstRef(t, name, x, r, backends, universe, probes, hash == tree.HashChained, step%8 == 0)
				}
				// The run must have reached the cases it is about.
				if dropped == 0 {
					t.Error("no Evict dropped anything")
				}
				if hash == tree.HashPosition && overpredicted == 0 {
					t.Error("position keys never over-predicted: the prompts do not collide")
				}
			})
		}
	}
}

// leafTail reports whether b holds no descendant of tail (the last blocks
// of keys) but tail's own blocks: no block of a recorded prompt that shares
// keys up to a tail block and goes on differently. Removing tail then leaves
// b's holdings prefix-closed.
func leafTail(r *blockRef, recorded [][]uint64, keys, tail []uint64, b string) bool {
	start := len(keys) - len(tail)
	for _, other := range recorded {
		for j := start; j < len(keys) && j < len(other) && other[j] == keys[j]; j++ {
			for _, k := range other[j+1:] {
				if !slices.Contains(tail, k) && r.has(k, b) {
					return false
				}
			}
		}
	}
	return true
}

func mustBlockIndex(t testing.TB, cfg tree.BlockIndexConfig) *tree.BlockIndex {
	t.Helper()
	x, err := tree.NewBlockIndex(cfg)
	if err != nil {
		t.Fatalf("NewBlockIndex(%+v): %v", cfg, err)
	}
	return x
}

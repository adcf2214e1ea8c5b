package policy_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// orderEngine makes KV event streams for TestKVEventBatchesEqualEventByEvent:
// an engine-like cache of chains hanging off the root and off each other,
// storing new pages one event per page, each after the eviction of a leaf
// once full (the interleaving ApplyKVEvents reorders), with noise an engine
// should not send but a router must survive: removals of the chain being
// stored, of its parent, of inner blocks and of unknown hashes, blocks stored
// again (the same or other tokens, under the same or another parent), stores
// below unknown parents, and clears. A block's tokens follow from its hash
// (and a salt when stored again with other content), so distinct blocks
// never share a token path.
type orderEngine struct {
	rng      *rand.Rand
	ps, max  int
	live     map[int64]int64 // hash → parent (0: the root)
	kids     map[int64]int
	salt     map[int64]uint32
	next     int64
	evs      []workers.KVEvent
	protect  map[int64]bool // the chain being stored and its ancestors
	noise    int            // one event in noise is noise
	attaches []int64        // live hashes, for picking
}

func (e *orderEngine) tokens(h int64) []uint32 {
	t := make([]uint32, e.ps)
	for i := range t {
		t[i] = uint32(h)*64 + e.salt[h]*8 + uint32(i) + 1
	}
	return t
}

func (e *orderEngine) store(h, parent int64) {
	ev := workers.KVEvent{Kind: workers.KVStored, Blocks: []workers.KVBlock{{Hash: h, Tokens: e.tokens(h)}}}
	if parent != 0 {
		ev.Parent, ev.HasParent = parent, true
	}
	e.evs = append(e.evs, ev)
	if old, ok := e.live[h]; ok && old != 0 {
		e.kids[old]--
	}
	e.live[h] = parent
	if parent != 0 {
		e.kids[parent]++
	}
}

func (e *orderEngine) remove(h int64) {
	e.evs = append(e.evs, removed(h))
	if p, ok := e.live[h]; ok {
		if p != 0 {
			e.kids[p]--
		}
		delete(e.live, h)
	}
}

// evictLeaf removes a leaf not on the chain being stored, as a full engine
// does before storing a page.
func (e *orderEngine) evictLeaf() {
	hs := make([]int64, 0, len(e.live))
	for h := range e.live {
		if e.kids[h] == 0 && !e.protect[h] {
			hs = append(hs, h)
		}
	}
	if len(hs) == 0 {
		return
	}
	slices.Sort(hs)
	e.remove(hs[e.rng.IntN(len(hs))])
}

// request stores a new chain below a random live block or the root.
func (e *orderEngine) request() {
	parent := int64(0)
	if len(e.live) > 0 && e.rng.IntN(3) > 0 {
		hs := make([]int64, 0, len(e.live))
		for h := range e.live {
			hs = append(hs, h)
		}
		slices.Sort(hs)
		parent = hs[e.rng.IntN(len(hs))]
	}
	clear(e.protect)
	for a := parent; a != 0 && !e.protect[a]; a = e.live[a] { // noise may make cycles
		e.protect[a] = true
	}
	for range 1 + e.rng.IntN(6) {
		if len(e.live) >= e.max {
			e.evictLeaf()
		}
		if e.rng.IntN(e.noise) == 0 {
			e.noiseEvent(parent)
		}
		e.next++
		h := e.next
		e.protect[h] = true
		e.store(h, parent)
		parent = h
	}
}

func (e *orderEngine) noiseEvent(parent int64) {
	pick := func() int64 { return 1 + e.rng.Int64N(e.next+3) } // sometimes unknown
	switch e.rng.IntN(7) {
	case 0:
		e.remove(parent) // the chain's parent, or its last block
	case 1:
		e.remove(pick()) // anything: an inner block, a chain block
	case 2:
		h := pick()
		p, ok := e.live[h]
		if !ok {
			p = 0
		}
		e.store(h, p) // the same block again (or a new one off the root)
	case 3:
		h := pick()
		e.salt[h]++
		e.store(h, e.live[h]) // other tokens under the same parent
	case 4:
		e.store(pick(), pick()) // under another parent, maybe unknown
	case 5:
		e.evs = append(e.evs, workers.KVEvent{Kind: workers.KVCleared})
		clear(e.live)
		clear(e.kids)
	case 6:
		hs := []int64{pick(), pick()}
		e.evs = append(e.evs, removed(hs...))
		for _, h := range hs {
			if p, ok := e.live[h]; ok {
				if p != 0 {
					e.kids[p]--
				}
				delete(e.live, h)
			}
		}
	}
}

// TestKVEventBatchesEqualEventByEvent checks that ApplyKVEvents, which
// applies a batch's evictions before the chain they are interleaved with
// when they commute, leaves cache_aware's tree exactly as applying the same
// events one batch each (in their order, nothing to reorder) does: what each
// worker holds, confirmed and speculative, after every step.
func TestKVEventBatchesEqualEventByEvent(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			e := newOrderEngine(rng, seed)
			w := fleet(1)[0]
			batched, each := exactTwins(t, w, e.ps)
			var seq uint64
			for step := range 40 {
				e.step()
				// The batched side gets the step's events in batches of
				// random sizes; the other one event per batch.
				for i := 0; i < len(e.evs); {
					n := min(len(e.evs)-i, 1+rng.IntN(24))
					batched.ApplyKVEvents(w.URL(), &workers.KVEventBatch{Seq: seq, Events: e.evs[i : i+n]})
					seq++
					i += n
				}
				for i := range e.evs {
					each.ApplyKVEvents(w.URL(), &workers.KVEventBatch{Seq: seq, Events: e.evs[i : i+1]})
					seq++
				}
				// A routing decision's speculative insert, on both.
				if rng.IntN(2) == 0 {
					h := 1 + rng.Int64N(e.next)
					ids := e.tokens(h)
					if p, ok := e.live[h]; ok && p != 0 {
						ids = append(e.tokens(p), ids...)
					}
					for _, p := range []*policy.CacheAware{batched, each} {
						if _, err := p.Select(context.Background(), &policy.Request{InputIDs: ids}, workers.Views([]*workers.Worker{w})); err != nil {
							t.Fatal(err)
						}
					}
				}
				for _, confirmed := range []bool{false, true} {
					got, want := holdings(batched, w.URL(), confirmed), holdings(each, w.URL(), confirmed)
					if !slices.Equal(got, want) {
						t.Fatalf("step %d (confirmed only: %v): batched holds %q, event by event %q\nevents: %+v",
							step, confirmed, got, want, e.evs)
					}
				}
			}
			sb, se := batched.EventStats(), each.EventStats()
			for _, k := range []string{"stored", "removed", "cleared"} {
				if sb.Applied[k] != se.Applied[k] {
					t.Fatalf("applied %s: batched %d, event by event %d", k, sb.Applied[k], se.Applied[k])
				}
			}
		})
	}
}

// step starts an order test's step: the events of one to four new requests.
func (e *orderEngine) step() {
	e.evs = nil
	for range 1 + e.rng.IntN(4) {
		e.request()
	}
}

// newOrderEngine is the engine of an order test, its shape drawn from seed.
func newOrderEngine(rng *rand.Rand, seed uint64) *orderEngine {
	return &orderEngine{rng: rng, ps: 1 + int(seed%2), max: 4 + rng.IntN(20),
		live: map[int64]int64{}, kids: map[int64]int{}, salt: map[int64]uint32{},
		protect: map[int64]bool{}, noise: []int{1_000_000, 8, 3}[seed%3]}
}

// exactTwins returns two cache_aware policies of page size ps that take w's
// KV events as exact: one for the way under test, one for the reference.
func exactTwins(t *testing.T, w *workers.Worker, ps int) (a, b *policy.CacheAware) {
	t.Helper()
	opts := policy.DefaultOptions()
	opts.CacheAware.BlockSize = ps
	a, b = newOrderCA(t, opts), newOrderCA(t, opts)
	for _, p := range []*policy.CacheAware{a, b} {
		p.SetKVEventMode(w.URL(), true)
	}
	return a, b
}

func newOrderCA(t *testing.T, o policy.Options) *policy.CacheAware {
	t.Helper()
	p, err := policy.NewCacheAware(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func holdings(p *policy.CacheAware, worker string, confirmed bool) []string {
	var out []string
	for _, path := range p.Holdings(worker, confirmed) {
		out = append(out, fmt.Sprint(path))
	}
	slices.Sort(out)
	return out
}

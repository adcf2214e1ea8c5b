package policy_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/workers"
)

// poison overwrites everything b points to, as the subscription's decoder
// does when it reads the next batch into the same memory.
func poison(b *workers.KVEventBatch) {
	for i := range b.Events {
		e := &b.Events[i]
		for j := range e.Blocks {
			bl := &e.Blocks[j]
			for k := range bl.Tokens {
				bl.Tokens[k] = 0xdead_beef
			}
			bl.Hash = -1
			if bl.LoRAID != nil {
				*bl.LoRAID = -1
			}
		}
		for k := range e.Hashes {
			e.Hashes[k] = -1
		}
		e.Parent, e.Kind = -1, workers.KVCleared
	}
	b.Events = b.Events[:0]
}

// TestKVEventHandlersKeepNoBatch holds cache_aware to KVEventHandler's
// contract: it keeps no part of a batch once ApplyKVEvents returns. Each
// batch is poisoned right after the call, by another goroutine (so that
// under -race a handler still reading it, then or later, is a reported
// race), and the policy must end up holding exactly what one fed batches
// nobody touches holds.
func TestKVEventHandlersKeepNoBatch(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			e := newOrderEngine(rng, seed)
			w := fleet(1)[0]
			reused, kept := exactTwins(t, w, e.ps)
			poisoned := make(chan struct{}, 1<<12) // the poisoners run beside the next calls
			var seq uint64
			for step := range 30 {
				e.step()
				for i := 0; i < len(e.evs); {
					n := min(len(e.evs)-i, 1+rng.IntN(24))
					b := (&workers.KVEventBatch{Seq: seq, Events: e.evs[i : i+n]}).Clone()
					kept.ApplyKVEvents(w.URL(), b.Clone())
					reused.ApplyKVEvents(w.URL(), b)
					go func() { poison(b); poisoned <- struct{}{} }()
					seq++
					i += n
				}
				for _, confirmed := range []bool{false, true} {
					if got, want := holdings(reused, w.URL(), confirmed), holdings(kept, w.URL(), confirmed); !slices.Equal(got, want) {
						t.Fatalf("step %d (confirmed only: %v): with batches poisoned after each call it holds %q, with batches left alone %q",
							step, confirmed, got, want)
					}
				}
			}
			for range seq {
				<-poisoned
			}
		})
	}
}

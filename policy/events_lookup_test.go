package policy_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvgate/kvgate/policy"
)

// TestKVEventsLookEachBlockUpOnce: a full engine's batch for a fresh prompt
// (its pages stored one event each, each after the removal of a page of the
// oldest prompt) costs the mirror one block-table lookup per event. A
// removed hash is looked up once, to learn whether its removal commutes with
// the chain being gathered, and then removed from what that lookup found; a
// new block is looked up once, to learn that it is new, and then stored from
// that. The table holds a cache's worth of blocks, so each lookup of a block
// not looked up lately is a cache miss; the mirror used to look a removed
// hash up about five times and a new block about three. A few more are
// allowed: removing a block moves back the table entries after it in its
// probe run, and a block whose entry moved is looked up again.
func TestKVEventsLookEachBlockUpOnce(t *testing.T) {
	const page = 16
	for _, c := range []struct {
		tokens, capacity int // capacity in pages
	}{
		{256, 8 * 16},     // each batch evicts one whole prompt
		{256, 8*16 + 5},   // and here parts of two
		{1024, 16 * 64},   // 1K-token prompts
		{1024, 4*64 + 37}, // 1K-token prompts, parts of two
	} {
		t.Run(fmt.Sprintf("prompt=%d,capacity=%d", c.tokens, c.capacity), func(t *testing.T) {
			ws := fleet(1)
			w := ws[0].URL()
			p := mustCA(t)
			p.SetKVEventMode(w, true)
			eng := &lruEngine{pageSize: page, capacity: c.capacity}
			rng := rand.New(rand.NewPCG(3, uint64(c.tokens)))
			prompt := func() []uint32 {
				ids := make([]uint32, c.tokens)
				for i := range ids {
					ids[i] = rng.Uint32N(150_000)
				}
				return ids
			}
			for range c.capacity*page/c.tokens + 2 { // fill the engine
				p.ApplyKVEvents(w, eng.request(prompt()))
			}
			for i := range 8 {
				b := eng.request(prompt())
				before := policy.MirrorLookups(p, w)
				p.ApplyKVEvents(w, b)
				if n, most := policy.MirrorLookups(p, w)-before, len(b.Events)*17/16; n > most {
					t.Fatalf("batch %d: %d lookups for %d events, want at most %d", i, n, len(b.Events), most)
				}
			}
			if st := p.EventStats(); st.Overflows != 0 || st.Applied["stored"] == 0 {
				t.Fatalf("events not applied as they came: %+v", st)
			}
		})
	}
}

package tree

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestExpireSpeculativeReplyEqualsJoined runs twin trees through the same
// random inserts, confirmations and trims, and expires decisions on one
// with ExpireSpeculative of prompt and reply joined, on the other with
// ExpireSpeculativeReply of the two parts, split anywhere (inside a page
// too): the results and what every tenant holds must stay equal.
func TestExpireSpeculativeReplyEqualsJoined(t *testing.T) {
	for seed := range uint64(400) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 3))
			ps := 1 + rng.IntN(3)
			joined, split := mustTree(t, Config{PageSize: ps}), mustTree(t, Config{PageSize: ps})
			// Chunks of one to three pages, so that prompts of a few pages
			// are matched by chunk keys (chunks.go), across the two parts too.
			ch := ps * (1 + rng.IntN(3))
			joined.chunk, split.chunk = ch, ch
			tenants := []string{"a", "b", "c"}
			ids := func() []uint32 {
				s := make([]uint32, rng.IntN(5*ps+2))
				for i := range s {
					s[i] = uint32(rng.IntN(3))
				}
				return s
			}
			type decision struct {
				ids    []uint32
				tenant string
				tick   uint64
			}
			var ds []decision
			for step := range 60 {
				in, tn := ids(), tenants[rng.IntN(len(tenants))]
				switch op := rng.IntN(6); op {
				case 0, 1:
					tick := joined.InsertSpeculative(in, tn)
					if got := split.InsertSpeculative(in, tn); got != tick {
						t.Fatalf("step %d: ticks %d and %d", step, tick, got)
					}
					ds = append(ds, decision{in, tn, tick})
				case 2:
					joined.InsertConfirmed(in, tn)
					split.InsertConfirmed(in, tn)
				case 3:
					keep := rng.IntN(len(in) + 1)
					joined.Trim(in, tn, keep)
					split.Trim(in, tn, keep)
				default:
					d := decision{in, tn, uint64(rng.IntN(step + 2))}
					if len(ds) > 0 && rng.IntN(4) > 0 {
						d = ds[rng.IntN(len(ds))]
					}
					cut := rng.IntN(len(d.ids) + 1)
					want := joined.ExpireSpeculative(d.ids, d.tenant, d.tick)
					got := split.ExpireSpeculativeReply(d.ids[:cut], d.ids[cut:], d.tenant, d.tick)
					if got != want {
						t.Fatalf("step %d: ExpireSpeculativeReply(%v, %v, %s, %d) = %d, ExpireSpeculative of the two joined %d",
							step, d.ids[:cut], d.ids[cut:], d.tenant, d.tick, got, want)
					}
				}
				for _, tn := range tenants {
					for _, confirmed := range []bool{false, true} {
						w, g := joined.Holdings(tn, confirmed), split.Holdings(tn, confirmed)
						if !slices.EqualFunc(w, g, slices.Equal) {
							t.Fatalf("step %d: %s holds %v, want %v", step, tn, g, w)
						}
					}
				}
			}
		})
	}
}

func mustTree(t *testing.T, cfg Config) *Tree {
	t.Helper()
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

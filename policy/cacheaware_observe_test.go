package policy_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestCacheAwareObserveReplyJoinsPrompt: a completed request's reply (but
// its last token) joins its prompt for the worker that served it, whether
// the prompt ends on a page boundary or not and whether Observe first
// trimmed the worker's path (the engine reported less cached than
// predicted), so the conversation's next turn is predicted up to the
// reply's last whole page. With KV events the reply is speculative and
// expires unless confirmed, the prompt's pages with it.
func TestCacheAwareObserveReplyJoinsPrompt(t *testing.T) {
	for _, events := range []bool{false, true} {
		for _, c := range []struct {
			name     string
			prompt   int
			reported func(predicted int) int
		}{
			{"as predicted", 64, func(p int) int { return p }},
			{"prompt ends mid-page", 70, func(p int) int { return p }},
			{"less cached than predicted", 64, func(int) int { return 16 }},
		} {
			t.Run(fmt.Sprintf("%s/events=%v", c.name, events), func(t *testing.T) {
				ws := fleet(2)
				p := newCA(t, nil)
				if events {
					p.SetKVEventMode(ws[0].URL(), true)
				}
				system := caTokens(1, 32)
				place(t, p, ws[0], caJoin(system, caTokens(2, 32))) // so the next selection predicts 32
				prompt := caJoin(system, caTokens(3, c.prompt-32))
				req := &policy.Request{InputIDs: prompt}
				d := caSelect(t, p, prompt, ws[0])
				reply := caTokens(4, 41)
				p.Observe(req, d, policy.Outcome{CachedTokens: c.reported(d.PredictedCachedTokens), OutputIDs: reply})
				next := caJoin(prompt, reply, caTokens(5, 20))
				want := (len(prompt) + len(reply) - 1) / 16 * 16
				if got := caExplain(t, p, next, ws...).PredictedCachedTokens; got != want {
					t.Fatalf("next turn predicted %d cached, want %d (prompt %d, reply %d)", got, want, len(prompt), len(reply))
				}
				if events {
					policy.ExpireSpeculations(p, time.Now().Add(time.Hour))
					if got := caExplain(t, p, next, ws...).PredictedCachedTokens; got != 0 {
						t.Fatalf("after expiry the next turn is predicted %d cached, want 0: nothing was confirmed", got)
					}
				}
			})
		}
	}
}

// BenchmarkObserve8K measures cache_aware's Observe of a completed 8K-token
// request with a 256-token reply, which puts the reply into the tree below
// the prompt: its allocations are the figure (B/op, allocs/op). Only
// Observe is timed; the Select that placed the request is not. "events" is
// a worker whose KV events flow (the reply is inserted speculatively and
// queued to expire), "no-events" one corrected from reported cached tokens.
// The prompts repeat (64 conversations' system prompts and histories), the
// replies are new each time, as in a chat fleet.
func BenchmarkObserve8K(b *testing.B) {
	for _, events := range []bool{true, false} {
		name := "no-events"
		if events {
			name = "events"
		}
		b.Run(name, func(b *testing.B) {
			p, err := policy.NewCacheAware(policy.DefaultOptions())
			if err != nil {
				b.Fatal(err)
			}
			ws := fleet(4)
			if events {
				for _, w := range ws {
					p.SetKVEventMode(w.URL(), true)
				}
			}
			rng := rand.New(rand.NewPCG(1, 1))
			prompts := make([][]uint32, 64)
			for i := range prompts {
				prompts[i] = make([]uint32, 8192)
				for j := range prompts[i] {
					prompts[i][j] = rng.Uint32N(150_000)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				req := &policy.Request{InputIDs: prompts[i%len(prompts)]}
				d, err := p.Select(context.Background(), req, workers.Views(ws))
				if err != nil {
					b.Fatal(err)
				}
				out := make([]uint32, 256)
				for j := range out {
					out[j] = rng.Uint32N(150_000)
				}
				o := policy.Outcome{CachedTokens: d.PredictedCachedTokens, OutputIDs: out}
				if i%256 == 255 {
					policy.ExpireSpeculations(p, time.Now().Add(time.Hour))
				}
				b.StartTimer()
				p.Observe(req, d, o)
			}
		})
	}
}

package policy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// simTokens is a prompt of n ids in the simulator's vocabulary, distinct
// for each seed below 40.
func simTokens(seed, n int) []uint32 { return testutil.Tokens(uint32(1+seed*3000), n) }

// relay sends ids to w over gRPC as the router's request path does: the
// worker counts the request in flight and its uncached tokens as queued
// prefill until the first token, so the worker learns the engine's speed.
// It returns when the stream ends, or once the first token has come when
// the engine stalls the request (then the request holds its running slot
// until ctx ends). id names the request to the engine.
func relay(ctx context.Context, w *workers.Worker, id string, ids []uint32, out uint32, stalled bool) error {
	release := w.Acquire()
	prefilled := w.Prefilling(len(ids))
	s, err := w.Backend().Generate(ctx, &workers.GenerateRequest{RequestID: id, InputIDs: ids,
		Sampling: workers.Sampling{MaxNewTokens: &out, IgnoreEOS: true}})
	if err != nil {
		prefilled.End()
		release()
		return err
	}
	for first := true; ; first = false {
		c, err := s.Recv()
		if first && err == nil {
			prefilled.Prefilled()
		} else if first {
			prefilled.End() // the stream ended without a token
		}
		switch {
		case err == nil && stalled:
			context.AfterFunc(ctx, release)
			return nil
		case errors.Is(err, io.EOF), err == nil && c.Final != nil:
			release()
			return nil
		case err != nil:
			release()
			return err
		}
	}
}

// TestWaitModeOnSimulatedEngines: two engines that run 2 requests at once
// (the simulator's H100 latencies), the wait mode in front. The router
// learns their speed from the requests it relays; then a prompt whose
// prefix one engine holds goes
//
//   - to the cold idle engine while the cached one is full and its requests
//     are long (its slot wait is longer than the prefill the cache saves),
//   - to the cached engine once every engine is full (the fleet's charge
//     for a copied prefix keeps affinity under pressure),
//   - but to the cold engine then with an uneven-lane charge: A's slot
//     frees far later than B's (its requests are long), and a request
//     added to the longer lane delays every later one sent there.
func TestWaitModeOnSimulatedEngines(t *testing.T) {
	cfg := simtest.Config(sim.ProtocolSGLang)
	cfg.TimeScale, cfg.MaxRunning, cfg.KVCapacityTokens = 1, 2, 65536
	ea, a := simtest.Worker(t, cfg)
	eb, b := simtest.Worker(t, cfg)
	if a.Info().MaxRunningRequests != 2 {
		t.Fatalf("the engine reports a running limit of %d, want 2", a.Info().MaxRunningRequests)
	}
	o := policy.DefaultOptions()
	o.CacheAware.Mode, o.CacheAware.UnevenWeight = policy.ModeWait, 0
	p, err := policy.NewCacheAware(o)
	if err != nil {
		t.Fatal(err)
	}
	o.CacheAware.UnevenWeight = 1
	even, err := policy.NewCacheAware(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Context(t, testutil.Patience)
	ws := workers.Views([]*workers.Worker{a, b})

	// The prompt's prefix on A, a cold prompt on B: each times a prefill
	// of 3,072 tokens (about 150 ms at 20,000 a second).
	prefix := simTokens(1, 3072)
	prompt := append(append([]uint32{}, prefix...), simTokens(2, 64)...)
	for _, c := range []struct {
		w   *workers.Worker
		ids []uint32
	}{{a, prefix}, {b, simTokens(3, 3072)}} {
		for _, p := range []*policy.CacheAware{p, even} {
			if _, err := p.Select(ctx, &policy.Request{InputIDs: c.ids}, workers.Views([]*workers.Worker{c.w})); err != nil {
				t.Fatal(err)
			}
		}
		if err := relay(ctx, c.w, fmt.Sprint("warm-", c.w.URL()), c.ids, 4, false); err != nil {
			t.Fatal(err)
		}
	}
	// A's requests are long: two of 200 tokens (1.6 s of decoding).
	done := make(chan error)
	for i := range 2 {
		go func() { done <- relay(ctx, a, fmt.Sprint("long-", i), simTokens(10+i, 64), 200, false) }()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if a.PrefillTokensPerSec() <= 0 || a.MeanRequestSeconds() < 1 {
		t.Fatalf("learned: A %.0f tokens/s, %.2fs a request; want both, and long requests", a.PrefillTokensPerSec(), a.MeanRequestSeconds())
	}

	// fill holds two requests on an engine (its limit), stalled after
	// their first token, until the test ends.
	fill := func(w *workers.Worker, engine *sim.Engine, seed int) {
		f := engine.Faults()
		f.StallAfterTokens = 1
		engine.SetFaults(f)
		for i := range 2 {
			if err := relay(ctx, w, fmt.Sprint("full-", seed+i), simTokens(seed+i, 64), 100, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	choose := func(p *policy.CacheAware) policy.Decision {
		t.Helper()
		d, err := p.Select(ctx, &policy.Request{InputIDs: prompt, DryRun: true}, ws)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	fill(a, ea.Engine(), 20)
	if d := choose(p); d.Worker != b {
		t.Errorf("A full, with long requests, and B idle: chose %s, want B: %s", d.Worker.URL(), d.Why())
	}
	fill(b, eb.Engine(), 30)
	if d := choose(p); d.Worker != a {
		t.Errorf("every engine full: chose %s, want A, which holds the prefix: %s", d.Worker.URL(), d.Why())
	} else {
		t.Log(d.Why())
	}
	if d := choose(even); d.Worker != b {
		t.Errorf("every engine full, A's slot far later than B's, uneven weight 1: chose %s, want B: %s", d.Worker.URL(), d.Why())
	} else {
		t.Log(d.Why())
	}
}

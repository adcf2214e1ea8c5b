package server_test

import (
	"testing"
	"time"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestTheRouterLearnsEachEnginesDecodeStep: the requests the router relays
// teach it the engine's decode step (the wait mode prices a candidate's
// batch with it): on an engine whose step is 5 ms, the learned step is at
// least that, and a request of one token, which has no step after its
// first, teaches nothing.
func TestTheRouterLearnsEachEnginesDecodeStep(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, sim: func(_ int, c *sim.Config) {
		c.TimeScale, c.DecodeMsPerToken, c.DecodeMsPerRunning, c.RequestOverhead = 1, 5, 0, 0
	}})
	w, ok := f.reg.Get("grpc://" + f.sims[0].Addr())
	if !ok {
		t.Fatal("the worker is not registered")
	}
	ctx := testutil.Context(t, testutil.Patience)
	one := &kvgatev1.GenerateRequest{InputIds: prompt(1, 16), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1), IgnoreEos: true}}
	if _, err := f.generate(ctx, t, one); err != nil {
		t.Fatal(err)
	}
	if m, ok := w.Step(); ok {
		t.Fatalf("a one-token request taught a step: %+v", m)
	}
	for i := range 3 {
		req := &kvgatev1.GenerateRequest{InputIds: prompt(uint32(100+20*i), 16), Stream: i%2 == 0,
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(20), IgnoreEos: true}}
		if _, err := f.generate(ctx, t, req); err != nil {
			t.Fatal(err)
		}
	}
	m, ok := w.Step()
	if !ok || m.Seconds(1) < (4*time.Millisecond).Seconds() {
		t.Fatalf("learned step %+v (%v), want at least the engine's 5 ms a token", m, ok)
	}
}

package workers_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestLoadPollsRecordAnEngineSlowerThanTheInterval: an engine that answers
// GetLoads three intervals late (a loaded Python engine while requests wait
// and the router polls every BusyLoadPollInterval) still has its figures
// recorded. A poll bounded by the interval was cancelled every time, so
// the figures never changed.
func TestLoadPollsRecordAnEngineSlowerThanTheInterval(t *testing.T) {
	cfg := simtest.Config(sim.ProtocolSGLang)
	cfg.Faults.RPC.Delayed, cfg.Faults.RPC.Delay = "GetLoads", 3*workers.BusyLoadPollInterval
	cfg.Faults.StallBeforeFirstToken = true
	srv, w := simtest.Worker(t, cfg)
	reg := workers.NewRegistry()
	if err := reg.Add(w); err != nil {
		t.Fatal(err)
	}

	// A request the engine runs that this router did not send (another
	// client's), which only a recorded poll shows.
	gctx, gcancel := context.WithCancel(testutil.Context(t, testutil.Patience))
	defer gcancel()
	if _, err := w.Backend().Generate(gctx, &workers.GenerateRequest{RequestID: "other", InputIDs: testutil.Tokens(1, 16)}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the engine to run the other client's request", func() bool { return srv.Engine().Stats().Running == 1 })

	rounds := make(chan struct{}, 1)
	hooks := workers.LoadPollHooks{Polled: func() {
		select {
		case rounds <- struct{}{}:
		default:
		}
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		workers.RunLoadPollsWith(ctx, reg, workers.BusyLoadPollInterval, hooks, nil)
	}()
	defer func() { cancel(); <-done }()

	// The first round to call Polled is the one after the answer came
	// (rounds whose polls are under way call nothing).
	testutil.Receive(t, rounds, "a round that recorded the engine's figures")
	if got := w.EngineLoad().Running; got != 1 {
		t.Fatalf("after a round of polls the engine's answer, %v late, is not recorded: %+v", cfg.Faults.RPC.Delay, w.EngineLoad())
	}
	if got := w.Load(); got != 1 {
		t.Errorf("Load() = %d, want the other client's request: 1", got)
	}
}

// TestLoadPollsStalledEngineHoldsUpNoOther: an engine that never answers
// GetLoads has one poll under way, not one more per round, and the other
// engine's polls go on at the busy interval meanwhile, each round that
// recorded its figures calling Polled; the polls end with the loop,
// leaving no goroutine behind.
func TestLoadPollsStalledEngineHoldsUpNoOther(t *testing.T) {
	testutil.NoLeaks(t)
	stalledCfg := simtest.Config(sim.ProtocolSGLang)
	stalledCfg.Faults.RPC.Stalled = "GetLoads"
	stalled, a := simtest.Worker(t, stalledCfg)
	quick, b := simtest.Worker(t, simtest.Config(sim.ProtocolVLLM))
	reg := workers.NewRegistry()
	for _, w := range []*workers.Worker{a, b} {
		if err := reg.Add(w); err != nil {
			t.Fatal(err)
		}
	}

	// An interval and a poll timeout of an hour: only the busy interval
	// polls again within the test, and the stalled poll never times out.
	busy := func() bool { return true }
	var rounds atomic.Int64
	hooks := workers.LoadPollHooks{Busy: busy, Timeout: time.Hour, Polled: func() { rounds.Add(1) }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		workers.RunLoadPollsWith(ctx, reg, time.Hour, hooks, nil)
	}()

	wctx := testutil.Context(t, testutil.Patience)
	if err := stalled.Engine().WaitCalls(wctx, "GetLoads", 1); err != nil {
		t.Fatal(err)
	}
	if err := quick.Engine().WaitCalls(wctx, "GetLoads", 5); err != nil {
		t.Fatalf("the other engine was polled %d times while one stalled, want 5 at the busy interval: %v",
			quick.Engine().Calls("GetLoads"), err)
	}
	if n := stalled.Engine().Calls("GetLoads"); n != 1 {
		t.Errorf("the stalled engine was asked GetLoads %d times, want once: its poll is still under way", n)
	}
	cancel()
	testutil.Receive(t, done, "RunLoadPollsWith to return, its stalled poll cancelled")
	// The other engine was polled 4 times or more (5 GetLoads, one of
	// them Connect's); the last round may have been cut short.
	if n := rounds.Load(); n < 3 {
		t.Errorf("Polled called %d times; want one per round that recorded the other engine's figures, at least 3", n)
	}
}

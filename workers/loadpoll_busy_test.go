package workers_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestLoadPollsQuickenWhileBusy: with an interval of an hour, an idle
// router polls once; while requests wait for room (Busy) it polls every
// BusyLoadPollInterval, and tells Polled after each round.
func TestLoadPollsQuickenWhileBusy(t *testing.T) {
	reg := workers.NewRegistry()
	cfg := sim.DefaultConfig()
	cfg.TimeScale, cfg.TokenizerDir, cfg.VocabSize = 0, "none", 1000
	cfg.Logger = slog.New(slog.DiscardHandler)
	srv, w := simtest.Worker(t, cfg)
	if err := reg.Add(w); err != nil {
		t.Fatal(err)
	}
	var busy atomic.Bool
	var rounds atomic.Int64
	hooks := workers.LoadPollHooks{Busy: busy.Load, Polled: func() { rounds.Add(1) }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		workers.RunLoadPollsWith(ctx, reg, time.Hour, hooks, nil)
	}()
	testutil.Eventually(t, "the first round", func() bool { return rounds.Load() == 1 })

	// Busy is read when the next wait is chosen: the first wait is an
	// hour. A new loop while busy polls quickly from the start.
	cancel()
	<-done
	busy.Store(true)
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() {
		defer close(done2)
		workers.RunLoadPollsWith(ctx2, reg, time.Hour, hooks, nil)
	}()
	defer func() { cancel2(); <-done2 }()
	before := srv.Engine().Calls("GetLoads")
	if err := srv.Engine().WaitCalls(testutil.Context(t, 5*time.Second), "GetLoads", before+3); err != nil {
		t.Fatalf("busy: GetLoads was not polled 3 more times within 5 s of an hour's interval: %v", err)
	}
	testutil.Eventually(t, "Polled after each round", func() bool { return rounds.Load() >= 4 })
}

package workers_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestLoadPollsStopOnUnimplemented: an engine answering GetLoads
// UNIMPLEMENTED is asked once, not at every interval, while an engine
// beside it is polled throughout; the worker shows it lacks GetLoads, and
// the log says so once.
func TestLoadPollsStopOnUnimplemented(t *testing.T) {
	for _, p := range simProtocols {
		t.Run(p.name, func(t *testing.T) {
			reg := workers.NewRegistry()
			var engines []*sim.Process
			for i := range 2 {
				cfg := sim.DefaultConfig()
				cfg.Protocol, cfg.TimeScale, cfg.TokenizerDir, cfg.VocabSize = p.name, 0, "none", 1000
				cfg.Logger = slog.New(slog.DiscardHandler)
				if i == 0 {
					cfg.Faults.RPC.Unimplemented = "GetLoads"
				}
				srv, w := simtest.Worker(t, cfg)
				if err := reg.Add(w); err != nil {
					t.Fatal(err)
				}
				engines = append(engines, srv)
			}
			// Connecting a vLLM engine asks GetLoads for the KV capacity.
			before := engines[0].Engine().Calls("GetLoads")
			logs := &testutil.Logs{Level: slog.LevelInfo}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				workers.RunLoadPolls(ctx, reg, 10*time.Millisecond, logs.Logger())
			}()
			defer func() { cancel(); <-done }()
			// Rounds never overlap, so the second engine's polls count them.
			rounds := func(n uint64) {
				t.Helper()
				if err := engines[1].Engine().WaitCalls(testutil.Context(t, 5*time.Second), "GetLoads", engines[1].Engine().Calls("GetLoads")+n); err != nil {
					t.Fatal(err)
				}
			}
			rounds(10)
			w, _ := reg.Get(engines[0].Addr())
			if w.Implements(workers.RPCGetLoads) {
				t.Fatal("after 10 rounds the worker is not marked as lacking GetLoads")
			}
			asked := engines[0].Engine().Calls("GetLoads") - before
			rounds(30)
			if n := engines[0].Engine().Calls("GetLoads") - before; n != asked || n > 2 {
				t.Errorf("the engine without GetLoads was asked %d times in 10 rounds and %d in 40; want once (twice if a poll timed out), then never", asked, n)
			}
			if n := len(logs.Records(slog.LevelInfo)); n != 1 {
				t.Errorf("%d log lines; want 1 saying GetLoads is missing", n)
			}
		})
	}
}

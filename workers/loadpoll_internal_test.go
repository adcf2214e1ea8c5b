package workers

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/workers/sim"
)

// TestLoadPollsRecheckAGetLoadsLacked: an engine that answered GetLoads
// UNIMPLEMENTED is asked again once LackingRecheck has passed, and an
// engine that implements it by then (upgraded in place) is polled from
// that round on.
func TestLoadPollsRecheckAGetLoadsLacked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg := NewRegistry()
	var ws []*Worker
	var engines []*sim.Engine
	for i := range 2 {
		cfg := sim.DefaultConfig()
		cfg.TimeScale, cfg.TokenizerDir, cfg.VocabSize = 0, "none", 1000
		cfg.Logger = slog.New(slog.DiscardHandler)
		if i == 0 {
			cfg.Faults.RPC.Unimplemented = "GetLoads"
		}
		srv, err := sim.Start(cfg, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		w, err := Connect(ctx, srv.Addr(), ConnectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Close() })
		if err := reg.Add(w); err != nil {
			t.Fatal(err)
		}
		ws, engines = append(ws, w), append(engines, srv.Engine())
	}
	var mu sync.Mutex
	now := time.Now()
	ws[0].caps.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		RunLoadPolls(pctx, reg, 50*time.Millisecond, nil)
	}()
	defer func() { stop(); <-done }()

	// Rounds never overlap, so the second engine's polls count them.
	rounds := func(n uint64) {
		t.Helper()
		if err := engines[1].WaitCalls(ctx, "GetLoads", engines[1].Calls("GetLoads")+n); err != nil {
			t.Fatal(err)
		}
	}
	rounds(3)
	if ws[0].Implements(RPCGetLoads) {
		t.Fatal("the worker is not marked as lacking GetLoads")
	}
	asked := engines[0].Calls("GetLoads")
	// The engine is upgraded; the router does not know until the recheck.
	engines[0].SetFaults(sim.Faults{})
	rounds(3)
	if n := engines[0].Calls("GetLoads"); n != asked {
		t.Fatalf("asked GetLoads %d times before the recheck; want %d", n, asked)
	}
	mu.Lock()
	now = now.Add(LackingRecheck)
	mu.Unlock()
	rounds(3)
	if n := engines[0].Calls("GetLoads"); n < asked+2 {
		t.Errorf("asked GetLoads %d times in 3 rounds after the recheck; want every round", n-asked)
	}
	if !ws[0].Implements(RPCGetLoads) {
		t.Error("the worker still lacks GetLoads after answering it")
	}
}

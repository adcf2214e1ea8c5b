// Package simtest starts simulated engines (workers/sim) for tests and
// connects workers to them. It is apart from testutil because it imports
// workers and the simulator, whose own in-package tests use testutil.
package simtest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// Config is a delay-free engine of protocol for tests: no latency, no
// tokenizer files, Llama 3's vocabulary and end-of-sequence id, a 4k
// context, 8k tokens of KV cache and a silent log. Tests change what they
// need before Start.
func Config(protocol string) sim.Config {
	cfg := sim.DefaultConfig()
	cfg.Protocol = protocol
	cfg.TimeScale = 0
	cfg.TokenizerDir = "none"
	cfg.VocabSize, cfg.EOSTokenID = 128256, 128001
	cfg.MaxContextLength, cfg.KVCapacityTokens = 4096, 8192
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

// Start serves an engine of configuration cfg on loopback; it stops when t
// ends.
func Start(t testing.TB, cfg sim.Config) *sim.Process {
	t.Helper()
	srv, err := sim.Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatalf("start the simulated engine: %v", err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// Worker serves an engine of configuration cfg and connects a worker to it
// in the role the engine plays, detecting its protocol; both end with t.
func Worker(t testing.TB, cfg sim.Config) (*sim.Process, *workers.Worker) {
	t.Helper()
	srv := Start(t, cfg)
	return srv, Connect(t, srv, workers.ConnectOptions{Role: role(cfg.Role)})
}

// role is the worker role of an engine role.
func role(engine string) workers.Role {
	switch engine {
	case sim.RolePrefill:
		return workers.RolePrefill
	case sim.RoleDecode:
		return workers.RoleDecode
	}
	return workers.RoleRegular
}

// Connect connects a worker to srv (detecting its protocol unless opts
// names one); the worker closes when t ends.
func Connect(t testing.TB, srv *sim.Process, opts workers.ConnectOptions) *workers.Worker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Patience)
	defer cancel()
	w, err := workers.Connect(ctx, srv.Addr(), opts)
	if err != nil {
		t.Fatalf("connect to the simulated engine at %s: %v", srv.Addr(), err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

package workers

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/kvgate/kvgate/workers/sim"
)

// TestAutoProbeRechecksAnUnimplementedHealthCheck: under ProbeAuto, an
// engine whose HealthCheck answered UNIMPLEMENTED is judged by GetModelInfo
// and its HealthCheck is not asked again until LackingRecheck has passed;
// then, implemented and healthy (upgraded in place), it is judged by it.
func TestAutoProbeRechecksAnUnimplementedHealthCheck(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.TimeScale, cfg.TokenizerDir, cfg.VocabSize = 0, "none", 1000
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Faults.RPC.Unimplemented = "HealthCheck"
	srv, err := sim.Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := Connect(ctx, srv.Addr(), ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	now := time.Now()
	p := newProber(ProbeAuto, w.URL(), slog.New(slog.DiscardHandler))
	p.now = func() time.Time { return now }
	e := srv.Engine()

	steps := []struct {
		name         string
		advance      time.Duration
		faults       sim.Faults
		wantUsed     HealthProbe
		healthChecks uint64 // HealthCheck calls so far
	}{
		{"the first check finds HealthCheck missing", 0, cfg.Faults, ProbeModelInfo, 1},
		{"it is not asked again before the recheck", LackingRecheck - time.Second, cfg.Faults, ProbeModelInfo, 1},
		{"the engine is upgraded; still not asked", 0, sim.Faults{}, ProbeModelInfo, 1},
		{"at the recheck it is asked, says healthy, and is used", time.Second, sim.Faults{}, ProbeEngine, 2},
		{"and used from then on", time.Second, sim.Faults{}, ProbeEngine, 3},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		e.SetFaults(s.faults)
		if err := p.check(ctx, w); err != nil {
			t.Fatalf("%s: check: %v", s.name, err)
		}
		if p.used != s.wantUsed || e.Calls("HealthCheck") != s.healthChecks {
			t.Errorf("%s: judged by %v after %d HealthCheck calls; want %v after %d", s.name, p.used, e.Calls("HealthCheck"), s.wantUsed, s.healthChecks)
		}
	}
}

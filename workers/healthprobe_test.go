package workers_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// monitored is a registry of simulated engines under a running health
// monitor, with every check result and health flip it reported.
type monitored struct {
	sims []*sim.Process
	ws   []*workers.Worker
	// base are the engines' calls before the monitor started (Connect's).
	base []map[string]uint64

	mu      sync.Mutex
	checks  map[*workers.Worker]int
	flips   []healthFlip
	changed chan struct{} // closed and replaced at each check
}

type healthFlip struct {
	worker  string
	healthy bool
}

// startMonitored serves n delay-free engines of protocol with tweak applied
// to their configs, registers them, and runs the health monitor with probe
// every millisecond (two failures mark a worker unhealthy) until the test
// ends.
func startMonitored(t *testing.T, n int, protocol string, probe workers.HealthProbe, tweak func(*sim.Config)) *monitored {
	t.Helper()
	m := &monitored{checks: map[*workers.Worker]int{}, changed: make(chan struct{})}
	reg := workers.NewRegistry()
	for range n {
		cfg := sim.DefaultConfig()
		cfg.Protocol, cfg.TimeScale, cfg.TokenizerDir, cfg.VocabSize = protocol, 0, "none", 1000
		cfg.Logger = slog.New(slog.DiscardHandler)
		if tweak != nil {
			tweak(&cfg)
		}
		srv, w := simtest.Worker(t, cfg)
		if err := reg.Add(w); err != nil {
			t.Fatal(err)
		}
		m.sims, m.ws = append(m.sims, srv), append(m.ws, w)
		base := map[string]uint64{}
		for _, rpc := range []string{"HealthCheck", "GetModelInfo", "Check", "GetLoads"} {
			base[rpc] = srv.Engine().Calls(rpc)
		}
		m.base = append(m.base, base)
	}
	cfg := workers.HealthConfig{
		Interval: time.Millisecond, Timeout: time.Second, FailureThreshold: 2, SuccessThreshold: 2, Probe: probe,
		OnChange: func(w *workers.Worker, healthy bool) {
			m.mu.Lock()
			m.flips = append(m.flips, healthFlip{w.URL(), healthy})
			m.mu.Unlock()
		},
		OnCheck: func(w *workers.Worker, _ error) {
			m.mu.Lock()
			m.checks[w]++
			close(m.changed)
			m.changed = make(chan struct{})
			m.mu.Unlock()
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		workers.RunHealthChecks(ctx, reg, cfg, nil)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return m
}

// waitChecks returns once every worker has been checked n times (rounds).
func (m *monitored) waitChecks(t *testing.T, n int) {
	t.Helper()
	// A safety net, not a wait: on a loaded machine rounds slow down.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		m.mu.Lock()
		least := n
		for _, w := range m.ws {
			least = min(least, m.checks[w])
		}
		ch := m.changed
		m.mu.Unlock()
		if least >= n {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("only %d of %d health check rounds", least, n)
		}
	}
}

// calls is how many calls of rpc engine i received from the monitor.
func (m *monitored) calls(i int, rpc string) uint64 {
	return m.sims[i].Engine().Calls(rpc) - m.base[i][rpc]
}

func (m *monitored) flipsSoFar() []healthFlip {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]healthFlip(nil), m.flips...)
}

// TestHealthEmptyFleetStaysServing: engines whose HealthCheck answers an
// empty message, and which lack GetLoads, GetTokenizer and
// SubscribeKvEvents, but serve Generate, stay healthy through many rounds
// of checks in the default mode, judged by GetModelInfo alone.
func TestHealthEmptyFleetStaysServing(t *testing.T) {
	for _, p := range simProtocols {
		t.Run(p.name, func(t *testing.T) {
			m := startMonitored(t, 2, p.name, workers.ProbeAuto, func(c *sim.Config) {
				c.Faults.RPC.HealthEmpty = true
				c.Faults.RPC.Unimplemented = "GetLoads,GetTokenizer,SubscribeKvEvents"
			})
			m.waitChecks(t, 10)
			if f := m.flipsSoFar(); len(f) != 0 {
				t.Fatalf("health flips %v; want none", f)
			}
			for i, w := range m.ws {
				if !w.Healthy() {
					t.Errorf("%s unhealthy", w.URL())
				}
				if got := w.HealthCheckInUse(); got != "model-info" {
					t.Errorf("%s judged by %q; want model-info", w.URL(), got)
				}
				if n := m.calls(i, "GetModelInfo"); n < 10 {
					t.Errorf("%s: %d GetModelInfo calls; want one a round", w.URL(), n)
				}
				if n := m.calls(i, "GetLoads"); n != 0 {
					t.Errorf("%s: the health checks asked GetLoads %d times; want never", w.URL(), n)
				}
			}
		})
	}
}

// TestHealthProbes: each --health-check mode against the engine behaviours
// it must tell apart. "healthy" is the worker's state after ten rounds of
// checks with two failures enough to take it out.
func TestHealthProbes(t *testing.T) {
	type engine struct {
		faults     sim.Faults
		grpcHealth bool
	}
	var (
		fine          = engine{}
		unhealthy     = engine{faults: sim.Faults{Unhealthy: true}}
		empty         = engine{faults: sim.Faults{RPC: sim.RPCFaults{HealthEmpty: true}}}
		emptyStandard = engine{faults: sim.Faults{RPC: sim.RPCFaults{HealthEmpty: true}}, grpcHealth: true}
		// The empty HealthCheck hides Unhealthy; grpc.health.v1 says
		// NOT_SERVING.
		emptyNotServing = engine{faults: sim.Faults{Unhealthy: true, RPC: sim.RPCFaults{HealthEmpty: true}}, grpcHealth: true}
		noHealthCheck   = engine{faults: sim.Faults{RPC: sim.RPCFaults{Unimplemented: "HealthCheck"}}}
		standard        = engine{grpcHealth: true}
		unhealthyBoth   = engine{faults: sim.Faults{Unhealthy: true}, grpcHealth: true}
	)
	tests := []struct {
		name      string
		probe     workers.HealthProbe
		engine    engine
		healthy   bool
		judgedBy  string
		perRound  string // the engine RPC each round calls
		notCalled string // an engine RPC no round calls
	}{
		{"auto: a HealthCheck saying healthy is used", workers.ProbeAuto, fine, true, "engine", "HealthCheck", "GetModelInfo"},
		{"auto: a HealthCheck saying unhealthy with a reason takes the worker out", workers.ProbeAuto, unhealthy, false, "engine", "HealthCheck", "GetModelInfo"},
		{"auto: an empty HealthCheck falls back to GetModelInfo", workers.ProbeAuto, empty, true, "model-info", "GetModelInfo", ""},
		{"auto: an empty HealthCheck falls back to grpc.health.v1 when served", workers.ProbeAuto, emptyStandard, true, "grpc-health", "Check", "GetModelInfo"},
		{"auto: grpc.health.v1 NOT_SERVING takes the worker out", workers.ProbeAuto, emptyNotServing, false, "grpc-health", "Check", ""},
		{"auto: an UNIMPLEMENTED HealthCheck is asked once, then GetModelInfo", workers.ProbeAuto, noHealthCheck, true, "model-info", "GetModelInfo", ""},
		{"engine: an empty HealthCheck takes the worker out", workers.ProbeEngine, empty, false, "engine", "HealthCheck", "GetModelInfo"},
		{"engine: a healthy HealthCheck", workers.ProbeEngine, fine, true, "engine", "HealthCheck", "GetModelInfo"},
		{"model-info: HealthCheck's answer is ignored", workers.ProbeModelInfo, unhealthy, true, "model-info", "GetModelInfo", "HealthCheck"},
		{"grpc-health: an engine that does not serve it is out", workers.ProbeGRPCHealth, fine, false, "grpc-health", "", "HealthCheck"},
		{"grpc-health: SERVING", workers.ProbeGRPCHealth, standard, true, "grpc-health", "Check", "HealthCheck"},
		{"grpc-health: NOT_SERVING", workers.ProbeGRPCHealth, unhealthyBoth, false, "grpc-health", "Check", "HealthCheck"},
		{"none: nothing is asked and nothing takes the worker out", workers.ProbeNone, unhealthyBoth, true, "none", "", "HealthCheck"},
	}
	for _, tt := range tests {
		for _, p := range simProtocols {
			t.Run(tt.name+"/"+p.name, func(t *testing.T) {
				m := startMonitored(t, 1, p.name, tt.probe, func(c *sim.Config) {
					c.Faults, c.GRPCHealth = tt.engine.faults, tt.engine.grpcHealth
				})
				m.waitChecks(t, 10)
				w := m.ws[0]
				if w.Healthy() != tt.healthy {
					t.Errorf("healthy = %v after 10 rounds; want %v (flips %v)", w.Healthy(), tt.healthy, m.flipsSoFar())
				}
				if got := w.HealthCheckInUse(); got != tt.judgedBy {
					t.Errorf("judged by %q; want %q", got, tt.judgedBy)
				}
				if tt.perRound != "" {
					if n := m.calls(0, tt.perRound); n < 10 {
						t.Errorf("%d %s calls in 10 rounds; want one a round", n, tt.perRound)
					}
				}
				if tt.notCalled != "" {
					if n := m.calls(0, tt.notCalled); n != 0 {
						t.Errorf("%d %s calls; want none", n, tt.notCalled)
					}
				}
				if tt.engine == noHealthCheck {
					if n := m.calls(0, "HealthCheck"); n != 1 {
						t.Errorf("%d HealthCheck calls; want 1 until the recheck", n)
					}
				}
			})
		}
	}
}

// TestHealthAutoHoldsAnEngineToItsWord: in the default mode, an engine
// whose HealthCheck once said healthy is unhealthy when it later answers
// false, empty or with a reason, and healthy again when it recovers.
func TestHealthAutoHoldsAnEngineToItsWord(t *testing.T) {
	for _, later := range []struct {
		name   string
		faults sim.Faults
	}{
		{"unhealthy", sim.Faults{Unhealthy: true}},
		{"empty", sim.Faults{RPC: sim.RPCFaults{HealthEmpty: true}}},
	} {
		for _, p := range simProtocols {
			t.Run(later.name+"/"+p.name, func(t *testing.T) {
				m := startMonitored(t, 1, p.name, workers.ProbeAuto, nil)
				w, e := m.ws[0], m.sims[0].Engine()
				m.waitChecks(t, 3)
				e.SetFaults(later.faults)
				m.waitFlip(t, healthFlip{w.URL(), false})
				if got := w.HealthCheckInUse(); got != "engine" {
					t.Errorf("judged by %q; want engine", got)
				}
				e.SetFaults(sim.Faults{})
				m.waitFlip(t, healthFlip{w.URL(), true})
			})
		}
	}
}

// waitFlip returns once the monitor has reported want.
func (m *monitored) waitFlip(t *testing.T, want healthFlip) {
	t.Helper()
	// A safety net, not a wait: on a loaded machine rounds slow down.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		m.mu.Lock()
		ch := m.changed
		m.mu.Unlock()
		for _, f := range m.flipsSoFar() {
			if f == want {
				return
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("no flip %+v; flips %v", want, m.flipsSoFar())
		}
	}
}

func TestParseHealthProbe(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want workers.HealthProbe
		ok   bool
	}{
		{"auto", workers.ProbeAuto, true},
		{"engine", workers.ProbeEngine, true},
		{"model-info", workers.ProbeModelInfo, true},
		{"grpc-health", workers.ProbeGRPCHealth, true},
		{"None", workers.ProbeNone, true},
		{"healthcheck", workers.ProbeAuto, false},
	} {
		got, err := workers.ParseHealthProbe(tt.in)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("ParseHealthProbe(%q) = %v, %v; want %v (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
		if tt.ok && got.String() != strings.ToLower(tt.in) {
			t.Errorf("%v.String() = %q; want %q", got, got.String(), strings.ToLower(tt.in))
		}
	}
}

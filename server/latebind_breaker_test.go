package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestLateBindingWakesWhenBreakerLetsThrough: requests wait in the router
// while one engine is full and the other's circuit breaker is open; when
// the breaker's timeout passes it lets a probe through, and the waiting
// requests are bound to that engine then, the first as the probe, the
// second once the probe closed the breaker. The load poller cannot be what
// binds them: every engine's GetLoads hangs (bindOnWakesOnly).
// Before, an open breaker turned half-open only when something asked it,
// and nothing asked while the requests slept: they waited for the queue's
// timeout.
func TestLateBindingWakesWhenBreakerLetsThrough(t *testing.T) {
	// breakerTimeout must outlast the few steps between the breaker
	// opening and both requests waiting (milliseconds; seconds at worst on
	// a loaded machine under the race detector).
	const breakerTimeout = 2 * time.Second
	// consistent_hashing honours x-target-worker, which opens the breaker.
	f := startFleet(t, fleetOptions{workers: 2, policy: "consistent_hashing",
		sim: oneFullEngine,
		config: func(c *router.Config) {
			bindOnWakesOnly(c)
			c.Admission.QueueTimeout = 20 * time.Second
			c.Breaker = workers.BreakerConfig{FailureThreshold: 1, SuccessThreshold: 1, Timeout: breakerTimeout, HalfOpenProbes: 1}
		}})
	roomy := f.workerURL(1)
	w, ok := f.reg.Get(roomy)
	if !ok {
		t.Fatalf("worker %s not registered", roomy)
	}

	// Open engine 1's breaker: a request sent there while it fails.
	failing := f.sims[1].Engine()
	failing.SetFaults(sim.Faults{Unavailable: true})
	ctx := testutil.Context(t, 30*time.Second)
	req := &kvgatev1.GenerateRequest{InputIds: prompt(9, 8), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2), IgnoreEos: true}}
	if _, err := f.generate(metadata.AppendToOutgoingContext(ctx, "x-target-worker", roomy), t, req); err == nil {
		t.Fatal("a request to the failing engine succeeded")
	}
	if s := w.Breaker().State(); s != workers.BreakerOpen {
		t.Fatalf("engine 1's breaker is %v after its failure, want open", s)
	}
	failing.SetFaults(sim.Faults{RPC: sim.RPCFaults{Stalled: "GetLoads"}})

	full := f.sims[0].Engine()
	faults := full.Faults()
	faults.RPC.Stalled = "GetLoads"
	full.SetFaults(faults)
	held, release := context.WithCancel(context.Background())
	defer release()
	startStream(t, f, held, 100) // the full engine's one slot: engine 1 is not available

	served := sendTwoWaiting(ctx, t, f)
	if s := w.Breaker().State(); s != workers.BreakerOpen {
		t.Fatalf("engine 1's breaker is %v once both requests wait, want still open (raise breakerTimeout)", s)
	}
	polls := full.Calls("GetLoads")
	for s := range served {
		if s != roomy {
			t.Errorf("a waiting request was served by %s, want the engine whose breaker let it through, %s", s, roomy)
		}
	}
	if s := w.Breaker().State(); s != workers.BreakerClosed {
		t.Errorf("engine 1's breaker is %v after its probe succeeded, want closed", s)
	}
	if n := full.Calls("GetLoads"); n > polls+1 {
		t.Errorf("%d load polls of the full engine meanwhile: only the breaker should have bound the requests", n-polls)
	}
}

package discovery_test

import (
	"context"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers/sim"
)

// A router with service discovery, once shut down, leaves no goroutine
// behind: informers, the reconcile loop and its joins and drains all end.
func TestShutdownLeavesNoGoroutine(t *testing.T) {
	cycle := func() {
		t.Run("cycle", func(t *testing.T) {
			c := startCluster(t, clusterOptions{})
			e := engine(t, sim.RoleRegular)
			c.create(podOf("p", e, true, map[string]string{"app": "engine"}))
			c.waitFleet("regular " + url(e))
			if _, err := c.generate(context.Background()); err != nil {
				t.Fatal(err)
			}
			c.update(podOf("p", e, false, map[string]string{"app": "engine"}))
			c.waitFleet()
		})
	}
	cycle() // what client-go and gRPC start once per process is running by now
	testutil.NoLeaks(t)
	cycle()
}

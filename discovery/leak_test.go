package discovery_test

import (
	"context"
	"runtime"
	"testing"
	"time"

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
	before := runtime.NumGoroutine()
	cycle()
	deadline := time.Now().Add(5 * time.Second) // goroutines that are ending get the time to
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if after := runtime.NumGoroutine(); after > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines leaked:\n%s", after-before, buf[:runtime.Stack(buf, true)])
	}
}

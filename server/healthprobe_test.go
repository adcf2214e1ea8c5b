package server_test

import (
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/gateway"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestHealthEmptyEnginesKeepServing: a fleet whose engines answer
// HealthCheck with an empty message (healthy unset) but serve Generate
// stays in rotation through many rounds of health checks that need a
// single failure to take a worker out, and serves on every worker.
func TestHealthEmptyEnginesKeepServing(t *testing.T) {
	for _, protocol := range []string{sim.ProtocolSGLang, sim.ProtocolVLLM} {
		t.Run(protocol, func(t *testing.T) {
			var mu sync.Mutex
			rounds := map[*workers.Worker]int{}
			enough := make(chan struct{})
			f := startFleet(t, fleetOptions{protocol: protocol, workers: 3, healthInterval: time.Millisecond,
				sim: func(_ int, c *sim.Config) { c.Faults.RPC.HealthEmpty = true },
				gateway: func(c *gateway.Config) {
					c.Health.OnCheck = func(w *workers.Worker, _ error) {
						mu.Lock()
						defer mu.Unlock()
						if rounds[w]++; len(rounds) == 3 && rounds[w] == 20 {
							for _, n := range rounds {
								if n < 20 {
									return
								}
							}
							close(enough)
						}
					}
				}})
			select {
			case <-enough:
			case <-time.After(30 * time.Second):
				t.Fatal("fewer than 20 rounds of health checks in 30 s")
			}
			for i := range f.sims {
				w, _ := f.reg.Get(f.workerURL(i))
				if !w.Healthy() || w.HealthCheckInUse() != "model-info" {
					t.Errorf("%s: healthy %v, judged by %q; want healthy by model-info", w.URL(), w.Healthy(), w.HealthCheckInUse())
				}
			}
			everyWorkerServes(t, f)
		})
	}
}

package server_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
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
				config: func(c *router.Config) {
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
			testutil.Receive(t, enough, "20 rounds of health checks")
			ws, err := f.admin.ListWorkers(context.Background(), &kvgatev1.ListWorkersRequest{})
			if err != nil || len(ws.GetWorkers()) != 3 {
				t.Fatalf("ListWorkers: %v, %v", ws, err)
			}
			for _, w := range ws.GetWorkers() {
				if w.GetHealth() != kvgatev1.Health_HEALTH_HEALTHY || w.GetHealthCheck() != "model-info" {
					t.Errorf("ListWorkers shows %s %v, judged by %q; want healthy by model-info", w.GetAddress(), w.GetHealth(), w.GetHealthCheck())
				}
			}
			everyWorkerServes(t, f)
		})
	}
}

// TestEmbedEmptyEnginesLackEmbed: engines whose Embed answers an empty
// message lack Embed. Fourteen calls (the count, which opened two
// breakers of three) each get UNIMPLEMENTED naming a worker and its empty
// answer; each engine is asked once in all, never again within the
// recheck; every breaker stays closed and Generate is served on all three.
func TestEmbedEmptyEnginesLackEmbed(t *testing.T) {
	for _, protocol := range []string{sim.ProtocolSGLang, sim.ProtocolVLLM} {
		t.Run(protocol, func(t *testing.T) { embedEmptyFleet(t, protocol) })
	}
}

func embedEmptyFleet(t *testing.T, protocol string) {
	f := startFleet(t, fleetOptions{protocol: protocol, workers: 3, sim: func(_ int, c *sim.Config) {
		c.Faults.RPC.EmbedEmpty = true
		c.Faults.RPC.Unimplemented = "GetLoads" // a second lack, which Embed's message must not mix in
	}})
	for i := range 14 {
		_, err := f.router.Embed(embedCtx(t), &kvgatev1.EmbedRequest{Inputs: []*kvgatev1.EmbedInput{{InputIds: prompt(uint32(1+i), 8)}}})
		st := status.Convert(err)
		if st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), "empty embedding") || !strings.Contains(st.Message(), "grpc://") {
			t.Fatalf("Embed %d: %v; want UNIMPLEMENTED naming a worker and its empty embedding", i, err)
		}
		if strings.Contains(st.Message(), "GetLoads") {
			t.Fatalf("Embed %d: %v; names GetLoads, which Embed does not need", i, err)
		}
	}
	for i, s := range f.sims {
		if n := s.Engine().Calls("Embed"); n != 1 {
			t.Errorf("engine %d was asked Embed %d times; want once", i, n)
		}
		if n := counter(t, f, "kvgate_worker_rpc_unimplemented_total", "worker", f.workerURL(i), "rpc", "Embed"); n != 1 {
			t.Errorf("kvgate_worker_rpc_unimplemented_total = %v for engine %d; want 1", n, i)
		}
	}
	everyWorkerServes(t, f)
}

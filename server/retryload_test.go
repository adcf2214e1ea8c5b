package server_test

import (
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// loadPlan sizes a run of concurrent clients. The short plan runs in every
// `go test`; KVGATE_CHAOS=full runs the one the figures in RELIABILITY.md
// come from.
type loadPlan struct {
	name              string
	requests, clients int
}

func loadPlanFromEnv() loadPlan {
	if os.Getenv("KVGATE_CHAOS") == "full" {
		return loadPlan{name: "full", requests: 2000, clients: 64}
	}
	return loadPlan{name: "short", requests: 400, clients: 32}
}

// stallTimeout ends the stall of the engine that fails: long enough that a
// healthy engine's first token never comes later, even with 64 clients on a
// machine busy with the race detector and other tests (at 1 s, under -race
// on two busy cores, healthy workers timed out too, their breakers opened,
// and the fleet failed as a whole).
const stallTimeout = 5 * time.Second

// TestPreFirstTokenFailuresAreRecoveredUnderLoad is the retry budget's
// promise at its defaults: when part of the fleet fails, every request whose
// worker failed before the first token is served by another worker, however
// many clients fail at once. (At 20% of the requests in flight alone, a burst
// of failures refused 8 of 1,814 such retries with one worker stalling, 9 of
// 2,049 with one answering UNAVAILABLE, 18 of 198 in PD.) Only the timeouts
// of a stall is shortened, so that it costs the test a second; the retry
// configuration and the circuit breakers are the defaults.
func TestPreFirstTokenFailuresAreRecoveredUnderLoad(t *testing.T) {
	plan := loadPlanFromEnv()
	tests := []struct {
		name    string
		workers int
		pd      bool
		// fault breaks the fleet; it is called as request i is sent.
		fault func(i int, f *fleet)
		// stall: the fault is a stall, which --first-token-timeout ends.
		stall bool
	}{
		{name: "one of 4 workers stalls before its first token", workers: 4, stall: true, fault: func(i int, f *fleet) {
			if i == 0 {
				f.sims[1].Engine().SetFaults(sim.Faults{StallBeforeFirstToken: true})
			}
		}},
		{name: "one of 4 workers answers UNAVAILABLE while healthy", workers: 4, fault: func(i int, f *fleet) {
			if i == 0 {
				f.sims[1].Engine().SetFaults(sim.Faults{Unavailable: true})
			}
		}},
		{name: "PD 4+4: a prefill then a decode worker killed", workers: 8, pd: true, fault: func(i int, f *fleet) {
			switch i {
			case plan.requests / 3:
				f.sims[0].Kill() // a prefill engine
			case 2 * plan.requests / 3:
				f.sims[4].Kill() // a decode engine
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs := newChaosLog()
			f := startFleet(t, fleetOptions{workers: tc.workers, pd: tc.pd, policy: "cache_aware",
				sim: func(_ int, c *sim.Config) {
					// Real (small) delays, so that many requests are in
					// flight when a worker fails.
					c.TimeScale, c.RequestOverhead, c.DecodeMsPerToken = 1, 2*time.Millisecond, 2
					if tc.pd {
						// As stallTimeout: on a busy machine a
						// healthy prefill's room may take longer
						// than the harness's 300 ms.
						c.BootstrapTimeout = stallTimeout
					}
				},
				config: func(c *router.Config) {
					if tc.stall {
						c.Reliability.FirstTokenTimeout = stallTimeout
					}
					c.Logger = slog.New(logs)
				}})
			vocab := f.sims[len(f.sims)-1].Engine().Config().VocabSize
			reqs := chaosRequests(rand.New(rand.NewPCG(1, 0x7265747279)), plan.requests)
			outcomes := callConcurrently(f, reqs, vocab, plan.clients, func(n int) { tc.fault(n, f) })

			prefirst, past, completed := logs.recovery(outcomes)
			refused := counter(t, f, "kvgate_retry_budget_exhausted_total")
			t.Logf("retry recovery: case=%q plan=%s requests=%d clients=%d prefirst_failures=%d past_first_token=%d completed=%d retries=%.0f budget_refusals=%.0f",
				tc.name, plan.name, len(reqs), plan.clients, prefirst, past, completed, counter(t, f, "kvgate_retries_total"), refused)
			if prefirst == 0 {
				t.Fatal("no request failed before its first token: the fault did not land")
			}
			for n, o := range outcomes {
				switch o.kind {
				case "ok":
				case "unavailable_after_first_token":
					if !tc.pd {
						t.Errorf("request %d failed after its first token, and this fault fails none so: %v", n, o.err)
					}
				default:
					t.Errorf("request %d (stream=%v): %s: %v", n, reqs[n].Stream, o.kind, o.err)
				}
			}
			if refused != 0 {
				t.Errorf("kvgate_retry_budget_exhausted_total = %v; a retry another worker could serve was refused", refused)
			}
		})
	}
}

// TestRetriesDoNotMultiplyTheLoadOfAFleetThatFailsWhole is the other half of
// the budget's promise, at the defaults: when every worker fails, the
// engines see no multiple of the clients' traffic. A request tries a worker
// at most once, a worker whose circuit breaker opened gets no attempts, and
// the budget falls to --retry-budget-percent of the requests in flight as
// the breakers open; so, however many requests are sent, the engines see at
// most, per worker, the failures that open its breaker and the attempts in
// flight on it when it opened.
func TestRetriesDoNotMultiplyTheLoadOfAFleetThatFailsWhole(t *testing.T) {
	plan := loadPlanFromEnv()
	const workers = 4
	tests := []struct {
		name   string
		faults sim.Faults
	}{
		{"every worker answers UNAVAILABLE while healthy", sim.Faults{Unavailable: true}},
		{"every worker stalls before its first token", sim.Faults{StallBeforeFirstToken: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var threshold int
			f := startFleet(t, fleetOptions{workers: workers, policy: "cache_aware",
				sim: func(_ int, c *sim.Config) {
					c.TimeScale, c.RequestOverhead, c.DecodeMsPerToken = 1, 2*time.Millisecond, 2
					c.Faults = tc.faults
				},
				config: func(c *router.Config) {
					// Every worker fails: how soon a stall is cut
					// does not matter here.
					c.Reliability.FirstTokenTimeout = time.Second
					threshold = c.Breaker.FailureThreshold
				}})
			vocab := f.sims[0].Engine().Config().VocabSize
			reqs := chaosRequests(rand.New(rand.NewPCG(2, 0x73746f726d)), plan.requests)
			outcomes := callConcurrently(f, reqs, vocab, plan.clients, nil)

			var attempts uint64
			for _, s := range f.sims {
				st := s.Engine().Stats()
				attempts += st.Requests + st.Rejected
			}
			bound := uint64(workers * (threshold + plan.clients))
			t.Logf("retry storm: case=%q plan=%s requests=%d clients=%d engine_attempts=%d bound=%d retries=%.0f budget_refusals=%.0f",
				tc.name, plan.name, len(reqs), plan.clients, attempts, bound,
				counter(t, f, "kvgate_retries_total"), counter(t, f, "kvgate_retry_budget_exhausted_total"))
			for n, o := range outcomes {
				if o.kind != "unavailable_before_first_token" {
					t.Errorf("request %d: %s (%v); want UNAVAILABLE before the first token", n, o.kind, o.err)
				}
			}
			if attempts > bound {
				t.Errorf("the engines saw %d attempts for %d requests; want at most %d (%d workers × (%d failures that open a breaker + %d clients))",
					attempts, len(reqs), bound, workers, threshold, plan.clients)
			}
		})
	}
}

// callConcurrently sends reqs through f from clients goroutines, each taking
// the next request not yet sent, and returns every request's outcome in
// order. before, when set, runs just before request n is sent (a fault
// that lands at a given point of the load).
func callConcurrently(f *fleet, reqs []*kvgatev1.GenerateRequest, vocab, clients int, before func(n int)) []chaosOutcome {
	outcomes := make([]chaosOutcome, len(reqs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				n := int(next.Add(1) - 1)
				if n >= len(reqs) {
					return
				}
				if before != nil {
					before(n)
				}
				outcomes[n] = callChaos(f, reqs[n], vocab)
			}
		})
	}
	wg.Wait()
	return outcomes
}

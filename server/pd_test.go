package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// startPDFleet is a router with prefill/decode disaggregation in front of
// two simulated prefill engines and two decode engines (indices 0-1 and 2-3),
// cache_aware placing the prefill leg and power_of_two the decode leg.
func startPDFleet(t *testing.T, protocol string, tweak func(i int, c *sim.Config)) *fleet {
	t.Helper()
	return startFleet(t, fleetOptions{protocol: protocol, workers: 4, pd: true, sim: tweak,
		config: func(c *router.Config) { c.PrefillPolicy, c.DecodePolicy = "cache_aware", "power_of_two" }})
}

func TestPDStreamsTheDecodeLegAndReusesThePrefillCache(t *testing.T) {
	for _, proto := range pdProtocols {
		t.Run(proto, func(t *testing.T) {
			f := startPDFleet(t, proto, nil)
			req := &kvgatev1.GenerateRequest{InputIds: prompt(10, 200), Stream: true,
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(12), IgnoreEos: true}}
			first := f.mustGenerate(t, req)
			c := first.complete
			if len(c.OutputIds) != 12 || len(first.chunks) == 0 {
				t.Fatalf("completion has %d ids after %d chunks, want 12", len(c.OutputIds), len(first.chunks))
			}
			if !strings.HasPrefix(c.PrefillWorker, "grpc://") || c.Worker == c.PrefillWorker {
				t.Fatalf("served by prefill %q, decode %q", c.PrefillWorker, c.Worker)
			}
			var published, fetched, waited uint64
			for _, s := range f.sims {
				st := s.Engine().Stats()
				published += st.RoomsPublished
				fetched += st.RoomsFetched
				waited += st.RoomWaits
			}
			if published != 1 || fetched != 1 || waited != 1 {
				t.Fatalf("rooms published %d, fetched %d, waited for %d; want the decode engine to fetch the prefill engine's room",
					published, fetched, waited)
			}
			again := f.mustGenerate(t, req).complete
			if again.PrefillWorker != c.PrefillWorker || again.Usage.CachedTokens <= c.Usage.CachedTokens {
				t.Fatalf("repeat: prefill %s (first %s), cached %d (first %d); want the same prefill engine and more cached tokens",
					again.PrefillWorker, c.PrefillWorker, again.Usage.CachedTokens, c.Usage.CachedTokens)
			}
			resp, err := f.admin.Explain(context.Background(), &kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Generate{Generate: req}})
			if err != nil || resp.PrefillWorker != c.PrefillWorker || resp.PrefillBranch != "cache_hit" {
				t.Fatalf("explain: %v, %v; want a cache_hit on %s", resp, err, c.PrefillWorker)
			}
			// Both legs' decisions are counted, each under its policy.
			for _, leg := range []struct{ policy, worker string }{{"pd_prefill:cache_aware", c.PrefillWorker}, {"pd_decode:power_of_two", c.Worker}} {
				if n := counter(t, f, "kvgate_policy_decisions_total", "policy", leg.policy); n != 2 {
					t.Errorf("%s decisions counted %v, want 2", leg.policy, n)
				}
				if n := counter(t, f, "kvgate_worker_selections_total", "policy", leg.policy, "worker", leg.worker); n < 1 {
					t.Errorf("%s selections of %s counted %v", leg.policy, leg.worker, n)
				}
			}
		})
	}
}

func TestPDFaults(t *testing.T) {
	for _, proto := range pdProtocols {
		tests := []struct {
			name   string
			faults func(i int, c *sim.Config)
			code   codes.Code
			leg    string
		}{
			{"prefill engine unavailable", func(i int, c *sim.Config) { c.Faults.Unavailable = i < 2 }, codes.Unavailable, "prefill"},
			{"prefill engine dies mid-request", func(i int, c *sim.Config) {
				if i < 2 {
					c.Faults.DropAfterTokens = 1
				}
			}, codes.Unavailable, "prefill"},
			{"decode engine unavailable", func(i int, c *sim.Config) { c.Faults.Unavailable = i >= 2 }, codes.Unavailable, "decode"},
			{"bootstrap never completes", func(i int, c *sim.Config) { c.Faults.NeverPublish = i < 2 }, codes.Unavailable, "decode"},
		}
		for _, tc := range tests {
			t.Run(proto+"/"+tc.name, func(t *testing.T) {
				f := startPDFleet(t, proto, tc.faults)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				r, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(10, 64), Stream: true,
					SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(8), IgnoreEos: true}})
				if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.leg) || r.complete != nil {
					t.Fatalf("err = %v, want %v naming the %s leg and no completion", err, tc.code, tc.leg)
				}
				freed(t, f)
			})
		}
		t.Run(proto+"/client cancels after the first token", func(t *testing.T) {
			f := startPDFleet(t, proto, func(i int, c *sim.Config) {
				if i >= 2 {
					c.Faults.StallAfterTokens = 2
				}
			})
			ctx, cancel := context.WithCancel(context.Background())
			f.streaming(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(10, 64),
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(50), IgnoreEos: true}})
			cancel()
			freed(t, f)
		})
	}
}

// freed waits until no engine holds a request and the router holds no load.
func freed(t *testing.T, f *fleet) {
	t.Helper()
	testutil.Eventually(t, "every engine and the router to free the request", func() bool {
		for _, s := range f.sims {
			if st := s.Engine().Stats(); st.Running+st.Waiting != 0 {
				return false
			}
		}
		for _, w := range f.reg.Snapshot() {
			if w.InFlight() != 0 {
				return false
			}
		}
		return true
	})
}

// A failed leg before the first token retries the pair: with one prefill
// and one decode engine failing, every request is served by the others.
func TestPDRetriesThePairElsewhere(t *testing.T) {
	for _, proto := range pdProtocols {
		for _, bad := range []int{0, 2} { // a prefill engine, a decode engine
			t.Run(fmt.Sprintf("%s/engine %d unavailable", proto, bad), func(t *testing.T) {
				f := startPDFleet(t, proto, func(i int, c *sim.Config) { c.Faults.Unavailable = i == bad })
				for i := range 8 {
					r := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(uint32(100*i), 64), Stream: true,
						SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(4), IgnoreEos: true}})
					if r.complete.Worker == f.workerURL(bad) || r.complete.PrefillWorker == f.workerURL(bad) {
						t.Fatalf("request %d served through the failing engine", i)
					}
				}
				if f.sims[bad].Engine().Stats().Rejected == 0 {
					t.Fatal("the failing engine was never tried; the test proves nothing")
				}
				if n := counter(t, f, "kvgate_retries_total"); n == 0 {
					t.Fatal("no retry counted")
				}
				freed(t, f)
			})
		}
	}
}

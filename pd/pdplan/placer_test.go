package pdplan_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/modeltable"
	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/pd/pdplan"
	"github.com/kvgate/kvgate/pipeline"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// The PD placer in the pipeline, without a server: a table of one model
// with a PD pairing over one prefill and one decode simulated engine of
// each protocol. A request is served on both legs (the completion names
// the decode worker, and the prefill worker beside it), the decisions are
// counted under the PD labels, the PD figures are recorded, and the room is
// given back; a failing decode engine fails the request with a fault
// naming it and counts a decode-leg failure.
func TestPlacerServesTwoLegsOnSimulatedEngines(t *testing.T) {
	for _, protocol := range []string{sim.ProtocolSGLang, sim.ProtocolVLLM} {
		for _, tc := range []struct {
			name          string
			decodeFails   bool
			wantFault     string // "" for a completion
			wantFailures  string // the kvgate_pd_failures_total series, or ""
			wantDecisions []string
		}{
			{name: "both legs serve",
				wantDecisions: []string{`policy="pd_decode:round_robin"`, `policy="pd_prefill:round_robin"`}},
			{name: "a failing decode engine fails the request", decodeFails: true,
				wantFault: "unavailable", wantFailures: `kvgate_pd_failures_total{leg="decode"} 1`},
		} {
			t.Run(protocol+"/"+tc.name, func(t *testing.T) {
				prefillW := engine(t, protocol, sim.RolePrefill, false)
				decodeW := engine(t, protocol, sim.RoleDecode, tc.decodeFails)
				reg := workers.NewRegistry()
				if err := reg.AddAll(prefillW, decodeW); err != nil {
					t.Fatal(err)
				}
				rel := pipeline.DefaultReliability()
				rel.Retry.MaxRetries = 0
				pm, m := pipeline.NewMetrics(), pdplan.NewMetrics()
				p := pipeline.New(pipeline.Config{Reliability: rel, Registry: reg, Metrics: pm})
				prefill, decode := policy.NewRoundRobin(), policy.NewRoundRobin()
				r, d := pdRoute(t, p, m, prefill, decode)

				var done *kvgatev1.GenerateComplete
				maxNew := uint32(4)
				j := &pipeline.Job{ID: "pd", Route: r, InputIDs: []uint32{11, 12, 13, 14, 15, 16, 17, 18},
					Sampling: &kvgatev1.SamplingParams{MaxNewTokens: &maxNew, IgnoreEos: true}, Start: time.Now(),
					Send: func(_ *kvgatev1.GenerateChunk, c *kvgatev1.GenerateComplete) error {
						if c != nil {
							done = c
						}
						return nil
					}}
				j.Task = p.Generation(j)
				err := p.Run(t.Context(), j)

				if tc.wantFault != "" {
					k, ok := fault.KindOf(err)
					if !ok || k.String() != tc.wantFault || !strings.Contains(err.Error(), decodeW.URL()) {
						t.Fatalf("Run = %v; want a %s fault naming the decode worker %s", err, tc.wantFault, decodeW.URL())
					}
				} else {
					if err != nil {
						t.Fatal(err)
					}
					if done == nil || done.Worker != decodeW.URL() || done.PrefillWorker != prefillW.URL() || len(done.OutputIds) != 4 {
						t.Fatalf("completion %v; want 4 tokens from %s, prefilled on %s", done, decodeW.URL(), prefillW.URL())
					}
					if n := histogramCount(t, m, "kvgate_pd_time_to_first_token_seconds"); n != 1 {
						t.Errorf("PD time to first token observed %d times; want 1", n)
					}
				}
				decisions := testutil.Series(t, pm, "kvgate_policy_decisions_total")
				for _, want := range tc.wantDecisions {
					if !slices.ContainsFunc(decisions, func(s string) bool { return strings.Contains(s, want) }) {
						t.Errorf("decisions %v; want one with %s", decisions, want)
					}
				}
				if tc.wantFailures != "" {
					if got := testutil.Series(t, m, "kvgate_pd_failures_total"); !slices.Contains(got, tc.wantFailures) {
						t.Errorf("PD failures %v; want %s", got, tc.wantFailures)
					}
				}
				testutil.Eventually(t, "the room given back", func() bool { return d.RoomsInFlight() == 0 })
			})
		}
	}
}

// pdRoute is the route of a table of one model served disaggregated
// through p, prefill and decode choosing its workers, its PD figures
// recorded in m; and the route's dispatcher.
func pdRoute(t *testing.T, p *pipeline.Pipeline, m *pdplan.Metrics, prefill, decode policy.Policy) (*pipeline.Route, *pd.Dispatcher) {
	t.Helper()
	d := pd.New(pd.Config{Prefill: prefill, Decode: decode})
	table := modeltable.New(modeltable.OneModel, func(r *pipeline.Route) pipeline.Placer { return pdplan.NewPlacer(p, m, r) })
	r, _, err := table.Ensure("", func() (modeltable.Spec, error) {
		return modeltable.Spec{PD: d, Policies: map[workers.Role]policy.Policy{workers.RolePrefill: prefill, workers.RoleDecode: decode}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return r, d
}

// engine serves a simulated engine of protocol in role (failing every call
// when unavailable) and connects a worker to it.
func engine(t *testing.T, protocol, role string, unavailable bool) *workers.Worker {
	t.Helper()
	cfg := simtest.Config(protocol)
	cfg.Role = role
	cfg.BootstrapTimeout = time.Second
	cfg.Faults.Unavailable = unavailable
	_, w := simtest.Worker(t, cfg)
	return w
}

// histogramCount is the number of observations of the histogram name that
// c collects.
func histogramCount(t *testing.T, c prometheus.Collector, name string) uint64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// TestPlacerTeachesTheEngines: a disaggregated request teaches the router
// what a regular one does. The prefill engine counts the prompt's tokens
// as queued prefill from the placement (the cost and wait modes price that
// queue) until the prefill leg ends, or the attempt ends unstarted; the
// prefill leg's time teaches the prefill engine's rate (an attempt ended
// unstarted teaches nothing); and the decode leg, from its first token to
// its end, the decode engine's step.
func TestPlacerTeachesTheEngines(t *testing.T) {
	for _, protocol := range []string{sim.ProtocolSGLang, sim.ProtocolVLLM} {
		t.Run(protocol, func(t *testing.T) {
			pcfg := simtest.Config(protocol)
			pcfg.Role, pcfg.BootstrapTimeout = sim.RolePrefill, time.Second
			pcfg.TimeScale, pcfg.PrefillTokensPerSec, pcfg.RequestOverhead = 1, 100_000, 0
			_, prefillW := simtest.Worker(t, pcfg)
			dcfg := simtest.Config(protocol)
			dcfg.Role, dcfg.BootstrapTimeout = sim.RoleDecode, time.Second
			dcfg.TimeScale, dcfg.DecodeMsPerToken, dcfg.DecodeMsPerRunning, dcfg.RequestOverhead = 1, 5, 0, 0
			_, decodeW := simtest.Worker(t, dcfg)
			reg := workers.NewRegistry()
			if err := reg.AddAll(prefillW, decodeW); err != nil {
				t.Fatal(err)
			}
			p := pipeline.New(pipeline.Config{Registry: reg})
			prefill, decode := policy.NewRoundRobin(), policy.NewRoundRobin()
			r, _ := pdRoute(t, p, pdplan.NewMetrics(), prefill, decode)
			job := func(first uint32, maxNew uint32) *pipeline.Job {
				ids := make([]uint32, 2048)
				for i := range ids {
					ids[i] = first + uint32(i)
				}
				j := &pipeline.Job{ID: "pd", Route: r, InputIDs: ids, Start: time.Now(),
					Sampling: &kvgatev1.SamplingParams{MaxNewTokens: &maxNew, IgnoreEos: true},
					Send:     func(*kvgatev1.GenerateChunk, *kvgatev1.GenerateComplete) error { return nil }}
				j.Task = p.Generation(j)
				return j
			}

			plan, err := pdplan.NewPlacer(p, pdplan.NewMetrics(), r).Place(t.Context(), job(10_000, 20), false)
			if err != nil {
				t.Fatal(err)
			}
			if got := prefillW.PendingPrefill(); got != 2048 {
				t.Errorf("placed, unstarted: the prefill engine counts %d tokens of queued prefill; want the prompt's 2048", got)
			}
			if got := decodeW.PendingPrefill(); got != 0 {
				t.Errorf("the decode engine counts %d tokens of queued prefill; want 0: it prefills nothing", got)
			}
			plan.Run.End(policy.Outcome{Err: context.Canceled})
			if got := prefillW.PendingPrefill(); got != 0 {
				t.Errorf("ended unstarted: the prefill engine still counts %d tokens", got)
			}

			for i := range 3 {
				if err := p.Run(t.Context(), job(uint32(20_000+5_000*i), 20)); err != nil {
					t.Fatal(err)
				}
			}
			if got := prefillW.PendingPrefill(); got != 0 {
				t.Errorf("after three requests the prefill engine still counts %d tokens", got)
			}
			// The leg's time holds the engine's prefill and more, so the
			// rate learned is at most the engine's: a faster one timed
			// something else (the attempt ended unstarted above).
			if rate := prefillW.PrefillTokensPerSec(); rate <= 0 || rate > 100_000 {
				t.Errorf("the prefill engine's learned rate is %.0f tokens/s; want some, and at most the engine's 100000", rate)
			}
			if m, ok := decodeW.Step(); !ok || m.Seconds(1) < (4*time.Millisecond).Seconds() {
				t.Errorf("the decode engine's learned step %+v (%v); want at least its 5 ms a token", m, ok)
			}
			if _, ok := prefillW.Step(); ok {
				t.Errorf("the prefill engine learned a decode step; it decodes nothing")
			}
		})
	}
}

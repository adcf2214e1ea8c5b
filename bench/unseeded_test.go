package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestUnseededRunsSendNoSeed: vLLM's CPU build dies on a seeded request
// whose prefill is split (its CPU random generator has no offset to rewind),
// so a run in front of it must send no seed. Against simulated vLLM engines
// that refuse any seed (--refuse-seed), a seeded run fails every request
// and an unseeded one none.
func TestUnseededRunsSendNoSeed(t *testing.T) {
	wc := tinyConfig(SharedPrefix)
	wc.Requests = 6
	wl, err := Generate(wc)
	if err != nil {
		t.Fatal(err)
	}
	sc := SimConfig()
	sc.Protocol, sc.TimeScale = "vllm", 0
	sc.Faults.RefuseSeed = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name      string
		unseeded  bool
		wantError bool
	}{
		{"seeded: the engines refuse every request", false, true},
		{"unseeded: every request served", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Policies: []string{"round_robin"}, Workers: 2, Sim: sc, Concurrency: 2, Seed: 1, Unseeded: tc.unseeded}
			rep, err := Run(ctx, cfg, wl)
			if tc.wantError {
				if err == nil || !strings.Contains(err.Error(), "seed") {
					t.Fatalf("Run: %v, %+v; want every request refused for its seed", err, rep)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r := rep.Runs[0]; r.Requests != wl.Size() || r.Errors != 0 {
				t.Fatalf("%d requests, %d errors; want %d, none", r.Requests, r.Errors, wl.Size())
			}
		})
	}
}

package pipeline

import (
	"errors"
	"fmt"
	"testing"

	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestPlanReadsTheSameForOneLegAndTwo pins what the pipeline, the relay and
// Explain read from a plan, for a whole request on one worker and for a
// prefill/decode pair alike: who serves, who is blamed for a failure, why
// the legs went where they did, and which worker prefilled.
func TestPlanReadsTheSameForOneLegAndTwo(t *testing.T) {
	worker := func(url string, role workers.Role) *workers.Worker {
		return workers.NewWorker(url, workers.ProtocolSGLang, role, workers.ModelInfo{}, nil, nil)
	}
	reg, pre, dec := worker("grpc://r:1", workers.RoleRegular), worker("grpc://p:1", workers.RolePrefill), worker("grpc://d:1", workers.RoleDecode)
	engineDown := errors.New("engine down")
	prefillFailed := fmt.Errorf("attempt: %w", &pd.LegError{Leg: "prefill", Worker: pre.URL(), Err: engineDown})
	decodeFailed := &pd.LegError{Leg: "decode", Worker: dec.URL(), Err: engineDown}

	one := &Plan{Legs: []Leg{{Role: "regular", Worker: reg, Policy: "cache_aware", Decision: policy.Decision{Worker: reg, Reason: "longest match"}}}}
	two := &Plan{Room: 7, Legs: []Leg{
		{Role: "prefill", Worker: pre, Policy: "cache_aware", Decision: policy.Decision{Worker: pre, Reason: "longest match"}},
		{Role: "decode", Worker: dec, Policy: "power_of_two", Decision: policy.Decision{Worker: dec, Reason: "lighter of two"}},
	}}
	for _, tc := range []struct {
		name    string
		p       *Plan
		served  *workers.Worker
		prefill *workers.Worker // the worker Explain and the completion name as prefill, or nil
		blame   map[error]*workers.Worker
		reason  string
	}{
		{name: "one worker serves and takes every blame", p: one, served: reg,
			blame:  map[error]*workers.Worker{engineDown: reg, prefillFailed: reg},
			reason: "longest match"},
		{name: "the decode worker serves; a leg's failure blames its worker", p: two, served: dec, prefill: pre,
			blame:  map[error]*workers.Worker{engineDown: dec, prefillFailed: pre, decodeFailed: dec},
			reason: "prefill: longest match; decode: lighter of two"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Served(); got != tc.served {
				t.Errorf("served = %v, want %v", got, tc.served)
			}
			if got := tc.p.Decision().Worker; got != tc.served {
				t.Errorf("decision's worker = %v, want the served %v", got, tc.served)
			}
			var prefill *workers.Worker
			if l := tc.p.Leg("prefill"); l != nil {
				prefill = l.Worker
			}
			if prefill != tc.prefill {
				t.Errorf("prefill leg's worker = %v, want %v", prefill, tc.prefill)
			}
			for err, want := range tc.blame {
				if got := tc.p.blame(err); got != want {
					t.Errorf("blame(%v) = %v, want %v", err, got, want)
				}
			}
			if got := tc.p.Reason(); got != tc.reason {
				t.Errorf("reason = %q, want %q", got, tc.reason)
			}
		})
	}
}

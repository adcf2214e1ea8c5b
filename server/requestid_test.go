package server_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

func TestXRequestIDNamesARequestWithoutOne(t *testing.T) {
	f := startFleet(t, fleetOptions{})
	tests := []struct {
		name      string
		requestID string // the request_id field
		header    string // x-request-id metadata
		want      string // the id on every response; "" means generated
		code      codes.Code
	}{
		{"the header names the request", "", "trace-7", "trace-7", codes.OK},
		{"the field wins over the header", "mine", "trace-7", "mine", codes.OK},
		{"neither: kvgate makes one", "", "", "", codes.OK},
		{"a header over the limit is refused", "", strings.Repeat("x", 257), "", codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.header != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "x-request-id", tt.header)
			}
			r, err := f.readGenerate(ctx, &kvgatev1.GenerateRequest{RequestId: tt.requestID, InputIds: prompt(1, 8),
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}})
			if status.Code(err) != tt.code {
				t.Fatalf("status %v (%v), want %v", status.Code(err), err, tt.code)
			}
			if tt.code != codes.OK {
				if !strings.Contains(err.Error(), "x-request-id") {
					t.Fatalf("error %q does not name x-request-id", err)
				}
				return
			}
			for _, id := range r.ids {
				if tt.want != "" && id != tt.want || tt.want == "" && id == "" {
					t.Fatalf("response request_id %q, want %q", id, tt.want)
				}
			}
		})
	}
}

// TestSMGMetricNames checks SMG's documented metrics exist under their names with
// smg_ replaced by kvgate_, so that their PromQL and alerts work unchanged.
func TestSMGMetricNames(t *testing.T) {
	f := startFleet(t, fleetOptions{policy: "cache_aware"})
	ids := prompt(1, 64)
	for range 2 { // a miss, then a hit
		if _, err := f.readGenerate(context.Background(), &kvgatev1.GenerateRequest{InputIds: ids,
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name string
		want float64
	}{
		{"kvgate_router_cache_hits_total", 1},
		{"kvgate_router_cache_misses_total", 1},
		{"kvgate_worker_selection_policy_branch_total", 2},
	} {
		if got := counter(t, f, tt.name); got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, got, tt.want)
		}
	}
	// Token counters: two 64-token prompts, the second found cached but
	// its last page, which the engine computes again.
	if got := counter(t, f, "kvgate_worker_prompt_tokens_total"); got != 128 {
		t.Errorf("prompt tokens %v, want 128", got)
	}
	if got := counter(t, f, "kvgate_worker_cached_tokens_total"); got != 48 {
		t.Errorf("cached tokens %v, want 48", got)
	}
	if got := counter(t, f, "kvgate_worker_completion_tokens_total"); got < 2 || got > 4 {
		t.Errorf("completion tokens %v, want 2 to 4", got)
	}
	mfs, err := f.srv.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, name := range []string{"kvgate_router_cache_tree_size", "kvgate_worker_requests_active", "kvgate_request_latency_seconds", "kvgate_worker_load",
		"kvgate_tree_max_tokens", "kvgate_worker_engine_cache_hit_rate", "kvgate_inter_token_latency_seconds"} {
		if !have[name] {
			t.Errorf("%s is not exported", name)
		}
	}
}

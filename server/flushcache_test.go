package server_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/tree"
)

// TestAdminFlushCache: Admin.FlushCache empties the engine's prefix cache
// and the router's tree for the worker, with KV events (the engine's cleared
// event would tell the mirror anyway) and without them (only the router
// knows what its decisions put in the tree): afterwards the router predicts
// no cached tokens, and the engine reports none.
func TestAdminFlushCache(t *testing.T) {
	for _, tt := range []struct {
		name, protocol string
		kvEvents       bool
	}{
		{"sglang, KV events", "sglang", true},
		{"vllm, KV events", "vllm", true},
		{"sglang, no KV events", "sglang", false},
		{"vllm, no KV events", "vllm", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: tt.protocol, workers: 1, policy: "cache_aware",
				config: func(c *router.Config) { c.KVEvents = tt.kvEvents }})
			ctx := context.Background()
			req := &kvgatev1.GenerateRequest{InputIds: prompt(7, 64), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}}
			f.mustGenerate(t, req)
			if got := f.mustGenerate(t, req).complete.GetUsage().GetCachedTokens(); got == 0 {
				t.Fatal("the repeated prompt found nothing cached before the flush")
			}
			url := f.workerURL(0)
			resp, err := f.admin.FlushCache(ctx, &kvgatev1.FlushCacheRequest{Address: url})
			if err != nil {
				t.Fatalf("FlushCache: %v", err)
			}
			if resp.GetWorker().GetAddress() != url || resp.GetMessage() == "" {
				t.Errorf("response %v, want the worker %s and the engine's message", resp, url)
			}
			if n := f.g.Policy.(interface{ TreeStats() tree.Stats }).TreeStats().TenantTokens[url]; n != 0 {
				t.Errorf("the tree holds %d tokens for the flushed worker", n)
			}
			ex, err := f.admin.Explain(ctx, &kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Generate{Generate: req}})
			if err != nil || ex.GetPredictedCachedTokens() != 0 {
				t.Errorf("Explain after the flush predicts %d cached tokens (%v), want 0", ex.GetPredictedCachedTokens(), err)
			}
			if got := f.mustGenerate(t, req).complete.GetUsage().GetCachedTokens(); got != 0 {
				t.Errorf("the engine reports %d cached tokens after the flush, want 0", got)
			}
		})
	}
}

// TestAdminFlushCacheRefusals: what a flush that cannot happen answers.
func TestAdminFlushCacheRefusals(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, policy: "cache_aware"})
	for _, tt := range []struct {
		name string
		req  *kvgatev1.FlushCacheRequest
		code codes.Code
		want string
	}{
		{"an unknown worker", &kvgatev1.FlushCacheRequest{Address: "grpc://127.0.0.1:1"}, codes.NotFound, "127.0.0.1:1"},
		{"no address", &kvgatev1.FlushCacheRequest{}, codes.InvalidArgument, "address"},
		{"a timeout over the limit", &kvgatev1.FlushCacheRequest{Address: f.workerURL(0), TimeoutSecs: 3601}, codes.InvalidArgument, "timeout_secs"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.admin.FlushCache(context.Background(), tt.req)
			if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%v, want %v naming %q", err, tt.code, tt.want)
			}
		})
	}
}

package bench

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers/sim"
)

func TestParsePolicyVariants(t *testing.T) {
	for _, tc := range []struct {
		label, name, mode, vllmMode, fallback, hash string
	}{
		{"cache_aware:cost", "cache_aware", "cost", "wait", "least_loaded", "chained"},
		{"cache_aware:threshold", "cache_aware", "threshold", "wait", "least_loaded", "chained"},
		{"cache_aware:cost:smallest_tree", "cache_aware", "cost", "wait", "smallest_tree", "chained"},
		{"cache_aware:wait", "cache_aware", "wait", "wait", "least_loaded", "chained"},
		{"vllm_cache_aware", "vllm_cache_aware", "wait", "wait", "least_loaded", "chained"},
		{"vllm_cache_aware:threshold", "vllm_cache_aware", "wait", "threshold", "least_loaded", "chained"},
		{"vllm_cache_aware:cost", "vllm_cache_aware", "wait", "cost", "least_loaded", "chained"},
		{"vllm_cache_aware:position:cost", "vllm_cache_aware", "wait", "cost", "least_loaded", "position"},
		{Pooled, "round_robin", "wait", "wait", "least_loaded", "chained"},
	} {
		name, o, err := ParsePolicy(tc.label)
		if err != nil || name != tc.name || o.CacheAware.Mode != tc.mode || o.VllmCacheAware.Mode != tc.vllmMode ||
			o.CacheAware.CacheMissFallback != tc.fallback || o.VllmCacheAware.BlockHash != tc.hash {
			t.Errorf("ParsePolicy(%q) = %q, %+v, %+v, %v", tc.label, name, o.CacheAware, o.VllmCacheAware, err)
		}
	}
	for _, label := range []string{"cache_aware:wait:u0.5", "vllm_cache_aware:u0.5:wait"} {
		if _, o, err := ParsePolicy(label); err != nil || o.CacheAware.UnevenWeight != 0.5 || o.VllmCacheAware.UnevenWeight != 0.5 {
			t.Errorf("ParsePolicy(%q) = %+v, %+v, %v; want uneven weight 0.5", label, o.CacheAware, o.VllmCacheAware, err)
		}
	}
	for _, bad := range []string{"round_robin:cost", "round_robin:u1", "cache_aware:position", "vllm_cache_aware:smallest_tree", "cache_aware:", "pooled:cost"} {
		if _, _, err := ParsePolicy(bad); err == nil {
			t.Errorf("ParsePolicy(%q) accepted", bad)
		}
	}
}

// TestPooledSim: the pooled engine has n engines' capacity, prefill rate and
// batch, and a decode step that grows with its batch as one engine's grows
// with its share.
func TestPooledSim(t *testing.T) {
	one := SimConfig()
	p := PooledSim(one, 8)
	if p.KVCapacityTokens != 8*one.KVCapacityTokens || p.PrefillTokensPerSec != 8*one.PrefillTokensPerSec ||
		p.MaxRunning != 8*one.MaxRunning || p.DecodeMsPerRunning*8 != one.DecodeMsPerRunning {
		t.Fatalf("PooledSim(8) = %+v from %+v", p, one)
	}
	if p.DecodeMsPerToken != one.DecodeMsPerToken || p.PageSize != one.PageSize || p.RequestOverhead != one.RequestOverhead {
		t.Fatalf("PooledSim changed what pooling does not: %+v", p)
	}
}

// TestCostModeEndToEnd runs conversations through real routers in the cost
// mode of both cache-aware policies and through the pooled reference: every
// request succeeds, turns find their history cached, and once the run is
// over the routers' count of queued prefill is back to zero on every worker
// (each request's count ended exactly once).
func TestCostModeEndToEnd(t *testing.T) {
	wl, err := Generate(tinyConfig(Multiturn))
	if err != nil {
		t.Fatal(err)
	}
	sc := SimConfig()
	sc.TimeScale = 0
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, label := range []string{"cache_aware:cost", "vllm_cache_aware:cost", Pooled} {
		t.Run(label, func(t *testing.T) {
			n, c := 2, sc
			if label == Pooled {
				n, c = 1, PooledSim(sc, 2)
			}
			f, err := StartTestbed(ctx, label, n, c)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			r, err := runOnce(ctx, Config{Seed: 1}, wl, label, mustDial(t, f.Addrs), f)
			if err != nil {
				t.Fatal(err)
			}
			if r.Requests != 12 || r.Errors != 0 {
				t.Fatalf("%d requests, %d errors; want 12, 0", r.Requests, r.Errors)
			}
			if r.CacheHitRate < 0.5 || r.OracleHitRate < r.CacheHitRate-1e-9 {
				t.Errorf("hit rate %v, oracle %v", r.CacheHitRate, r.OracleHitRate)
			}
			ws := f.routers[0].Registry.Snapshot()
			if len(ws) != n {
				t.Fatalf("%d workers registered, want %d", len(ws), n)
			}
			for _, w := range ws {
				if w.PendingPrefill() != 0 || w.InFlight() != 0 {
					t.Errorf("%s after the run: %d prefill tokens pending, %d in flight; want 0, 0", w.URL(), w.PendingPrefill(), w.InFlight())
				}
			}
		})
	}
}

// TestPrefillCountEndsAtFirstToken is the router's count of queued prefill
// on a worker, over real gRPC: a request whose engine has sent nothing yet
// counts its whole uncached prompt; once its first token has passed through
// the router it counts nothing, though it is still in flight; and a request
// the client leaves counts nothing either.
func TestPrefillCountEndsAtFirstToken(t *testing.T) {
	const prompt = 4096
	for _, tc := range []struct {
		name        string
		faults      sim.Faults
		firstToken  bool // the client reads a first token before checking
		wantPending int
	}{
		{"before the first token: the whole prompt", sim.Faults{StallBeforeFirstToken: true}, false, prompt},
		{"after the first token: nothing", sim.Faults{StallAfterTokens: 1}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := SimConfig()
			sc.TimeScale = 0
			sc.Faults = tc.faults
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			f, err := StartTestbed(ctx, "cache_aware:cost", 1, sc)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			w := f.routers[0].Registry.Snapshot()[0]
			conn, err := grpc.NewClient(f.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			sctx, leave := context.WithCancel(ctx)
			defer leave()
			maxNew := uint32(8)
			stream, err := kvgatev1.NewRouterClient(conn).Generate(sctx, &kvgatev1.GenerateRequest{
				InputIds: testutil.Tokens(1, prompt), Stream: true,
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: &maxNew, IgnoreEos: true},
			})
			if err != nil {
				t.Fatal(err)
			}
			if tc.firstToken {
				if _, err := stream.Recv(); err != nil {
					t.Fatal(err)
				}
			}
			testutil.Eventually(t, "the request in flight", func() bool { return w.InFlight() == 1 })
			if got := w.PendingPrefill(); got != tc.wantPending {
				t.Fatalf("%d prefill tokens pending with the request in flight, want %d", got, tc.wantPending)
			}
			leave()
			testutil.Eventually(t, "nothing in flight", func() bool { return w.InFlight() == 0 })
			if got := w.PendingPrefill(); got != 0 {
				t.Fatalf("after the client left: %d prefill tokens pending, want 0", got)
			}
		})
	}
}

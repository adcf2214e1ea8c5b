package workers_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestEngineKilledAndRestarted: for a connected worker, an engine killed
// mid-stream is UNAVAILABLE on the stream and on health checks; after the
// engine restarts at the same address the same Worker (its gRPC connection
// reconnects) serves again, with the restarted engine's empty cache.
func TestEngineKilledAndRestarted(t *testing.T) {
	for _, p := range allSimProtocols {
		t.Run(p.name, func(t *testing.T) {
			srv, w := simtest.Worker(t, simtest.Config(p.name))
			srv.Engine().SetFaults(sim.Faults{StallAfterTokens: 1})
			ctx, cancel := context.WithCancel(testutil.Context(t, 5*time.Second))
			defer cancel()
			req := &workers.GenerateRequest{RequestID: "r", InputIDs: testutil.Tokens(5, 40),
				Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](4), IgnoreEOS: true}}
			s, err := w.Backend().Generate(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Recv(); err != nil {
				t.Fatal(err)
			}

			srv.Kill()
			if err := recvUntilError(s); status.Code(err) != codes.Unavailable {
				t.Fatalf("in-flight stream of a killed engine: %v, want UNAVAILABLE", err)
			}
			if err := w.Backend().Health(testutil.Context(t, 5*time.Second)); status.Code(err) != codes.Unavailable {
				t.Fatalf("Health of a killed engine: %v, want UNAVAILABLE", err)
			}

			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "the worker's connection to come back", func() bool { return w.Backend().Health(testutil.Context(t, 5*time.Second)) == nil })
			s, err = w.Backend().Generate(testutil.Context(t, 5*time.Second), req)
			if err != nil {
				t.Fatal(err)
			}
			chunks := drain(t, s)
			if fin := chunks[len(chunks)-1].Final; fin.FinishReason != "length" || fin.CachedTokens != 0 {
				t.Errorf("after restart: completion %+v, want a full generation with nothing cached", fin)
			}
		})
	}
}

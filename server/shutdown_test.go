package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers/sim"
)

// A shutdown lets running requests finish: a generation in flight when it
// starts completes, health turns NOT_SERVING at once, and the router then
// closes.
func TestShutdownDrainsRunningRequests(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, sim: func(_ int, c *sim.Config) {
		c.TimeScale = 1
		c.DecodeMsPerToken = 10
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := startStream(t, f, ctx, 40)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		f.g.Shutdown(sctx)
	}()
	hc := healthpb.NewHealthClient(f.conn)
	testutil.Eventually(t, "health to report NOT_SERVING", func() bool {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err != nil || r.Status == healthpb.HealthCheckResponse_NOT_SERVING
	})
	tokens := 1
	for {
		m, err := st.Recv()
		if err != nil {
			t.Fatalf("the request in flight was cut by the shutdown after %d tokens: %v", tokens, err)
		}
		if c := m.GetComplete(); c != nil {
			if len(c.OutputIds) != 40 {
				t.Fatalf("completed with %d tokens, want 40", len(c.OutputIds))
			}
			break
		}
		tokens += len(m.GetChunk().GetTokenIds())
	}
	testutil.Receive(t, stopped, "the router to stop after its last request")
}

// A request still running when the drain period ends is aborted on its
// engine and ends with UNAVAILABLE saying kvgate is shutting down.
func TestShutdownCutsWhatOutlivesTheDrain(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, sim: func(_ int, c *sim.Config) { c.Faults.StallAfterTokens = 2 }})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := startStream(t, f, ctx, 40)
	sctx, scancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer scancel()
	f.g.Shutdown(sctx)
	var err error
	for {
		_, err = st.Recv()
		if err != nil {
			break
		}
	}
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "kvgate is shutting down") {
		t.Fatalf("err = %v, want UNAVAILABLE saying kvgate is shutting down", err)
	}
	eng := f.sims[0].Engine()
	testutil.Eventually(t, "the engine to receive Abort", func() bool { return eng.Stats().AbortCalls == 1 && eng.Stats().Running == 0 })
}

package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// TestRoutingMetadata sends the routing headers a client would, under
// consistent_hashing and manual, and checks where requests land.
func TestRoutingMetadata(t *testing.T) {
	req := &kvgatev1.GenerateRequest{InputIds: prompt(1, 8), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}}
	call := func(f *fleet, kv ...string) (*kvgatev1.GenerateComplete, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := f.generate(metadata.AppendToOutgoingContext(ctx, kv...), t, req)
		return r.complete, err
	}

	t.Run("x-target-worker picks by index", func(t *testing.T) {
		f := startFleet(t, fleetOptions{workers: 3, policy: "consistent_hashing"})
		for _, h := range []string{"x-target-worker", "x-smg-target-worker"} {
			for i := range 3 {
				c, err := call(f, h, string(rune('0'+i)))
				if err != nil || c.Worker != f.workerURL(i) {
					t.Fatalf("%s: %d: %v, %v; want %s", h, i, c.GetWorker(), err, f.workerURL(i))
				}
			}
		}
		// A target the client got wrong is its mistake, not a reason to retry.
		for _, bad := range []string{"7", "-1", "two"} {
			_, err := call(f, "x-target-worker", bad)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "x-target-worker") {
				t.Fatalf("target %q of 3: %v, want INVALID_ARGUMENT naming x-target-worker", bad, err)
			}
		}
	})

	t.Run("a routing key sticks to one worker", func(t *testing.T) {
		for _, pol := range []string{"consistent_hashing", "manual"} {
			f := startFleet(t, fleetOptions{workers: 3, policy: pol})
			for _, key := range []string{"session-a", "session-b", "session-c"} {
				first, err := call(f, "x-routing-key", key)
				if err != nil {
					t.Fatal(err)
				}
				for range 4 {
					c, err := call(f, "x-smg-routing-key", key)
					if err != nil || c.Worker != first.Worker {
						t.Fatalf("%s: key %s went to %v (%v), first to %s", pol, key, c.GetWorker(), err, first.Worker)
					}
				}
			}
		}
	})
}

package workers_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/internal/testutil"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestEngineReceiveLimits: over a connection Connect made, a Generate
// answer beyond grpc's default 4 MiB (prompt log-probabilities of 40,000
// tokens at top 20) arrives whole, while every other call keeps the 4 MiB
// limit: an engine whose model information is 5 MiB is refused, with the
// router's own RESOURCE_EXHAUSTED.
func TestEngineReceiveLimits(t *testing.T) {
	start := func(t *testing.T, cfg sim.Config) string {
		t.Helper()
		srv, err := sim.Start(cfg, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		return srv.Addr()
	}
	t.Run("a Generate answer beyond 4 MiB", func(t *testing.T) {
		w, err := workers.Connect(testutil.Context(t, 5*time.Second), start(t, simConfig()), workers.ConnectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ids := make([]uint32, 40_000)
		for i := range ids {
			ids[i] = uint32(1 + i%997)
		}
		one := uint32(1)
		st, err := w.Backend().Generate(testutil.Context(t, 5*time.Second), &workers.GenerateRequest{RequestID: "big", InputIDs: ids,
			Sampling: workers.Sampling{MaxNewTokens: &one}, Logprobs: &workers.LogprobRequest{Prompt: true, TopK: workers.MaxTopLogprobs}})
		if err != nil {
			t.Fatal(err)
		}
		prompt := 0
		for {
			ch, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("after %d prompt logprobs: %v", prompt, err)
			}
			prompt += len(ch.PromptLogprobs)
			if ch.Final != nil {
				prompt += len(ch.Final.PromptLogprobs)
				break
			}
		}
		if prompt < len(ids) {
			t.Errorf("%d prompt logprobs; want %d", prompt, len(ids))
		}
	})
	t.Run("model information beyond 4 MiB", func(t *testing.T) {
		cfg := simConfig()
		cfg.Model = strings.Repeat("m", 5<<20)
		_, err := workers.Connect(testutil.Context(t, 5*time.Second), start(t, cfg), workers.ConnectOptions{})
		if status.Code(err) != codes.ResourceExhausted || !workers.LocalLimit(err) {
			t.Fatalf("Connect: %v; want the router's RESOURCE_EXHAUSTED", err)
		}
	})
}

package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// hugeText is prose of n bytes: words and single spaces.
func hugeText(n int) string {
	words := []string{"hello ", "world ", "the ", "router ", "kvgate ", "token "}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(words[i*7%len(words)])
	}
	return b.String()[:n]
}

// A text far beyond the model's context is refused with INVALID_ARGUMENT
// naming the field and the context, by Generate, Chat and Explain alike.
func TestHugeTextIsRefusedNamingTheContext(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, text: true, sim: func(_ int, c *sim.Config) { c.MaxContextLength = 4096 }})
	const want = "has more than 4095 tokens; the model's context is 4096 tokens"
	text := hugeText(6 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	calls := []struct {
		name, field string
		call        func() error
	}{
		{"Generate", "text", func() error {
			_, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{Text: text})
			return err
		}},
		{"Chat", "the rendered conversation", func() error {
			_, err := f.chat(ctx, t, &kvgatev1.ChatRequest{Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: text}}})
			return err
		}},
		{"Explain", "text", func() error {
			_, err := f.admin.Explain(ctx, &kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Generate{Generate: &kvgatev1.GenerateRequest{Text: text}}})
			return err
		}},
	}
	for _, c := range calls {
		err := c.call()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.field+" "+want) {
			t.Errorf("%s with a 6 MiB text and a 4,096-token context: %v, want INVALID_ARGUMENT naming %s and the context", c.name, err, c.field)
		}
	}
	// A prompt that fits is still served, through the same path.
	f.mustGenerate(t, &kvgatev1.GenerateRequest{Text: hugeText(2000), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}})
}

// Explain tokenizes and routes as Generate does, so it waits for an
// admission place as Generate does: with every place taken and no queue, it
// is refused.
func TestExplainIsAdmissionControlled(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1,
		sim: func(_ int, c *sim.Config) { c.Faults.StallAfterTokens = 1 },
		config: func(c *router.Config) {
			c.Admission.MaxConcurrentRequests, c.Admission.QueueSize = 1, 0
			c.Reliability.StreamIdleTimeout = 0
		}})
	held, release := context.WithCancel(context.Background())
	defer release()
	startStream(t, f, held, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Generate{Generate: &kvgatev1.GenerateRequest{InputIds: prompt(1, 8)}}}
	_, err := f.admin.Explain(ctx, req)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-concurrent-requests") {
		t.Fatalf("Explain with every place taken: %v, want RESOURCE_EXHAUSTED naming --max-concurrent-requests", err)
	}
	release()
	testutil.Eventually(t, "the held request's place to be free", func() bool {
		_, err := f.admin.Explain(ctx, req)
		return err == nil
	})
}

package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestLogprobBytesAreBoundedInFlight: requests asking for log-probabilities
// weigh what their answers may carry, and together they stay within
// --max-logprob-bytes: one more is refused at once with RESOURCE_EXHAUSTED
// naming the flag, a request asking for none is served meanwhile, one that
// could never fit is INVALID_ARGUMENT, and the weight is given back when a
// request ends.
func TestLogprobBytesAreBoundedInFlight(t *testing.T) {
	const promptTokens = 2_000
	// One prompt_logprobs request of 2,000 positions at top 20 weighs
	// 2,000 × (24 + 21 × 9) = 426,000 bytes; the budget takes one.
	f := startFleet(t, fleetOptions{
		workers: 1,
		sim:     func(_ int, c *sim.Config) { c.TimeScale = 1 }, // 8 ms a token
		config:  func(c *router.Config) { c.Admission.MaxLogprobBytes = 600_000 },
	})
	// A heavy request in flight: it streams for minutes (100,000 tokens)
	// until the test cancels it.
	heavy := promptLogprobs(promptTokens)
	heavy.Stream = true
	heavy.SamplingParams.MaxNewTokens = u32(100_000)
	actx, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	st, err := f.router.Generate(actx, heavy, bigAnswers)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("the first heavy request's first chunk: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = generateCall(ctx, f, promptLogprobs(promptTokens))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-logprob-bytes") {
		t.Fatalf("a second heavy request while the first runs: %v; want RESOURCE_EXHAUSTED naming --max-logprob-bytes", err)
	}
	if _, err := generateCall(ctx, f, &kvgatev1.GenerateRequest{InputIds: prompt(5, 8),
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2), IgnoreEos: true}}); err != nil {
		t.Fatalf("a request without log-probabilities meanwhile: %v", err)
	}
	_, err = generateCall(ctx, f, promptLogprobs(4*promptTokens))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "--max-logprob-bytes") {
		t.Fatalf("a heavy request beyond the whole budget: %v; want INVALID_ARGUMENT naming --max-logprob-bytes", err)
	}

	// The first request ends; its weight comes back as the router sees it
	// end, which the next requests wait for.
	cancelA()
	for {
		_, err := generateCall(ctx, f, promptLogprobs(promptTokens))
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted || ctx.Err() != nil {
			t.Fatalf("a heavy request after the first ended: %v", err)
		}
	}
}

package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

// startStream starts a streaming generation of maxNew tokens and returns
// once its first chunk arrived; on a worker that stalls after its first
// token, the request keeps its place until ctx ends.
func startStream(t *testing.T, f *fleet, ctx context.Context, maxNew uint32) grpc.ServerStreamingClient[kvgatev1.GenerateResponse] {
	t.Helper()
	st, err := f.router.Generate(ctx, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8), Stream: true,
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(maxNew), IgnoreEos: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("stream's first chunk: %v", err)
	}
	return st
}

func TestAdmissionBoundsConcurrencyAndItsQueue(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1,
		sim: func(_ int, c *sim.Config) { c.Faults.StallAfterTokens = 1 },
		config: func(c *router.Config) {
			c.Admission.MaxConcurrentRequests, c.Admission.QueueSize, c.Admission.QueueTimeout = 2, 1, 300*time.Millisecond
			c.Reliability.StreamIdleTimeout = 0
		}})
	held, cancelHeld := context.WithCancel(context.Background())
	defer cancelHeld()
	startStream(t, f, held, 100)
	second, cancelSecond := context.WithCancel(context.Background())
	startStream(t, f, second, 100)

	// A third request waits in the queue and gives up after the queue timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(2, 4), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--queue-timeout-secs") {
		t.Fatalf("queued past the timeout: %v, want RESOURCE_EXHAUSTED naming --queue-timeout-secs", err)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Fatalf("refused after %v; it should have waited in the queue first", waited)
	}

	// While one request waits, the queue (of 1) is full: the next is refused
	// at once.
	queued := make(chan error, 1)
	go func() {
		_, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(3, 4), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}})
		queued <- err
	}()
	testutil.Eventually(t, "a request to wait in the queue", func() bool { return gauge(t, f, "kvgate_admission_queue_depth") == 1 })
	_, err = f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(4, 4), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--queue-size") {
		t.Fatalf("queue full: %v, want RESOURCE_EXHAUSTED naming --queue-size", err)
	}

	// A place frees up: the queued request runs. (The stalled worker then
	// holds it too, so it is ended by the test's context.)
	cancelSecond()
	testutil.Eventually(t, "the queued request to be admitted", func() bool { return gauge(t, f, "kvgate_admission_queue_depth") == 0 })
	select {
	case err := <-queued:
		if status.Code(err) == codes.ResourceExhausted {
			t.Fatalf("the queued request was refused: %v", err)
		}
	default:
	}
}

func TestRateLimitPerKey(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, config: func(c *router.Config) { c.Admission.RateLimitPerKey = 2 }})
	call := func(key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := f.generate(metadata.AppendToOutgoingContext(ctx, "x-routing-key", key), t,
			&kvgatev1.GenerateRequest{InputIds: prompt(1, 4), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}})
		return err
	}
	for i := range 2 {
		if err := call("alice"); err != nil {
			t.Fatalf("alice's request %d within the burst: %v", i, err)
		}
	}
	if err := call("alice"); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--rate-limit-per-key") {
		t.Fatalf("alice's third request at once: %v, want RESOURCE_EXHAUSTED naming --rate-limit-per-key", err)
	}
	if err := call("bob"); err != nil {
		t.Fatalf("bob is limited by alice's traffic: %v", err)
	}
	if n := gauge(t, f, "kvgate_rate_limit_keys"); n != 2 {
		t.Fatalf("kvgate_rate_limit_keys = %v, want 2 (alice, bob)", n)
	}
}

func TestRequestSizeLimits(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, text: true, config: func(c *router.Config) {
		c.MaxRequestBytes = 1 << 20
		c.Admission.MaxChatMessages = 4
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{Text: strings.Repeat("a", 2<<20)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a 2 MiB request with a 1 MiB limit: %v, want RESOURCE_EXHAUSTED", err)
	}
	msgs := make([]*kvgatev1.ChatMessage, 5)
	for i := range msgs {
		msgs[i] = &kvgatev1.ChatMessage{Role: "user", Content: "hi"}
	}
	_, err = f.chat(ctx, t, &kvgatev1.ChatRequest{Messages: msgs})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "messages has 5 entries; the limit is 4") {
		t.Fatalf("5 messages with a limit of 4: %v, want INVALID_ARGUMENT naming the limit", err)
	}
}

// gauge reads one unlabelled gauge from the router's metrics.
func gauge(t *testing.T, f *fleet, name string) float64 {
	t.Helper()
	mfs, err := f.srv.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/server"
	"github.com/kvgate/kvgate/workers/sim"
)

// A client that opens a stream and stops reading it is cut loose once the
// router's send has waited --stream-send-timeout for it, on Generate and
// Chat alike: the engine's request is aborted, the admission place is free
// for the next client, and the stalled client, should it read again, finds
// what was sent before the stall and then DEADLINE_EXCEEDED naming the
// flag. Without the bound the engine ran the request on and the place
// stayed held for as long as the connection was open (this test, so
// changed, timed out with the engine still running 20 s later).
func TestStreamSendTimeoutFreesAClientThatStopsReading(t *testing.T) {
	const tokens = 120_000 // far more than HTTP/2's windows hold unread
	sp := func() *kvgatev1.SamplingParams {
		return &kvgatev1.SamplingParams{MaxNewTokens: u32(tokens), IgnoreEos: true}
	}
	// Each opens its call, reads one message, and returns the stream's
	// next message: whether it is the completion, or the error.
	for _, tc := range []struct {
		name string
		open func(ctx context.Context, t *testing.T, f *fleet) func() (bool, error)
	}{
		{"Generate", func(ctx context.Context, t *testing.T, f *fleet) func() (bool, error) {
			st, err := stingyClient(t, f).Generate(ctx, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8), Stream: true, SamplingParams: sp()})
			if err == nil {
				_, err = st.Recv()
			}
			if err != nil {
				t.Fatal(err)
			}
			return func() (bool, error) { m, err := st.Recv(); return m.GetComplete() != nil, err }
		}},
		{"Chat", func(ctx context.Context, t *testing.T, f *fleet) func() (bool, error) {
			st, err := stingyClient(t, f).Chat(ctx, &kvgatev1.ChatRequest{Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "Tell me everything."}},
				Stream: true, SamplingParams: sp()})
			if err == nil {
				_, err = st.Recv()
			}
			if err != nil {
				t.Fatal(err)
			}
			return func() (bool, error) { m, err := st.Recv(); return m.GetComplete() != nil, err }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleet(t, fleetOptions{workers: 1, text: true, config: func(c *router.Config) {
				// One place and no queue: a place the stalled call kept
				// would refuse the next request at once.
				c.Admission.MaxConcurrentRequests, c.Admission.QueueSize = 1, 0
				c.Admission.StreamSendTimeout = 200 * time.Millisecond
			}})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			next := tc.open(ctx, t, f)
			// The call has read one message and reads no more until the
			// router is free.
			eng := f.sims[0].Engine()
			testutil.EventuallyState(t, testutil.Patience, "the engine's request to end", func() (bool, string) {
				s := eng.Stats()
				return s.Running == 0 && s.Requests == 1, fmt.Sprintf("running %d of %d requests, %d tokens generated", s.Running, s.Requests, s.GeneratedTokens)
			})
			if got := eng.Stats().GeneratedTokens; got >= tokens {
				t.Fatalf("the engine generated all %d tokens: the stalled stream did not stop it", got)
			}
			testutil.Eventually(t, "the stalled call's place to be free", func() bool {
				return gauge(t, f, "kvgate_requests_in_flight") == 0
			})
			r := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(100, 8), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}})
			if r.complete.GetUsage().GetCompletionTokens() != 2 {
				t.Fatalf("the next request completed %d tokens, want 2", r.complete.GetUsage().GetCompletionTokens())
			}
			var chunks int
			for {
				complete, err := next()
				if err != nil {
					if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "--stream-send-timeout") {
						t.Fatalf("the stalled stream, read again, ended with %v; want DEADLINE_EXCEEDED naming --stream-send-timeout", err)
					}
					break
				}
				if complete {
					t.Fatalf("the stalled stream completed after %d chunks", chunks)
				}
				chunks++
			}
			if chunks == 0 {
				t.Fatal("the stalled stream held none of what was sent before it stalled")
			}
			testutil.Eventually(t, "the cut to be counted", func() bool {
				return counter(t, f, "kvgate_client_timeouts_total", "bound", "stream_send") == 1
			})
		})
	}
}

// stingyClient is a client of f's router whose flow-control windows stay
// at HTTP/2's 64 KiB. grpc-go's client otherwise grows them with the
// link's bandwidth-delay product, up to 16 MiB a stream, whether or not
// its application reads: a loaded machine's slow round trips could let it
// take a whole answer unread, and the router would never stall.
func stingyClient(t *testing.T, f *fleet) kvgatev1.RouterClient {
	t.Helper()
	cc, err := grpc.NewClient(f.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return kvgatev1.NewRouterClient(cc)
}

// The bounds a client is held to are on a message each, not on the call: a
// generation that streams for many times a bound, its request sent at
// once and its answer read as it comes, completes under either.
func TestClientBoundsSpareALongAnswer(t *testing.T) {
	const bound = 20 * time.Millisecond
	for _, tc := range []struct {
		name string
		set  func(*server.AdmissionConfig)
	}{
		{"--request-read-timeout", func(c *server.AdmissionConfig) { c.RequestReadTimeout = bound }},
		{"--stream-send-timeout", func(c *server.AdmissionConfig) { c.StreamSendTimeout = bound }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleet(t, fleetOptions{workers: 1,
				sim: func(_ int, c *sim.Config) {
					// 20 tokens of 10 ms: the answer streams for 10 bounds.
					c.TimeScale, c.DecodeMsPerToken = 1, 10
				},
				config: func(c *router.Config) { tc.set(&c.Admission) }})
			start := time.Now()
			r := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8), Stream: true, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(20)}})
			if got := r.complete.GetUsage().GetCompletionTokens(); got != 20 {
				t.Fatalf("completed %d tokens, want 20", got)
			}
			if took := time.Since(start); took < 5*bound {
				t.Fatalf("the generation took %v, under 5 bounds (%v): it proves nothing", took, 5*bound)
			}
		})
	}
}

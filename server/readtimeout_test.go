package server_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/router"
)

// silentCall opens a call of the given method over the fleet's connection
// and sends nothing: no request message, no half-close. It stays open until
// ctx ends.
func silentCall(t *testing.T, f *fleet, ctx context.Context, method string) grpc.ClientStream {
	t.Helper()
	st, err := f.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		t.Fatalf("open %s: %v", method, err)
	}
	return st
}

// A call holds an admission place only once its request has arrived: calls
// that open and send nothing leave the places to clients that do send.
// (grpc-go reads a unary call's request before any interceptor runs, so
// Embed is admitted after its request by construction.)
func TestSilentCallsHoldNoAdmissionPlace(t *testing.T) {
	for _, method := range []string{"/kvgate.v1.Router/Generate", "/kvgate.v1.Router/Chat"} {
		t.Run(method[strings.LastIndex(method, "/")+1:], func(t *testing.T) {
			f := startFleet(t, fleetOptions{workers: 1, config: func(c *router.Config) {
				c.Admission.MaxConcurrentRequests, c.Admission.QueueSize = 2, 0
				c.Admission.RequestReadTimeout = time.Minute
			}})
			held, release := context.WithCancel(context.Background())
			defer release()
			const silent = 3 // more than the places
			for range silent {
				silentCall(t, f, held, method)
			}
			testutil.Eventually(t, "the silent calls to reach the router", func() bool {
				return gauge(t, f, "kvgate_requests_awaiting_message") == silent
			})
			r := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2)}})
			if r.complete.GetUsage().GetCompletionTokens() != 2 {
				t.Fatalf("the request beside the silent calls completed %d tokens, want 2", r.complete.GetUsage().GetCompletionTokens())
			}
			release()
			testutil.Eventually(t, "the silent calls to end", func() bool {
				return gauge(t, f, "kvgate_requests_awaiting_message") == 0
			})
		})
	}
}

// A streaming call whose request does not arrive within
// --request-read-timeout is ended with DEADLINE_EXCEEDED naming the flag.
func TestRequestReadTimeoutEndsSilentCalls(t *testing.T) {
	for _, method := range []string{"/kvgate.v1.Router/Generate", "/kvgate.v1.Router/Chat"} {
		t.Run(method[strings.LastIndex(method, "/")+1:], func(t *testing.T) {
			f := startFleet(t, fleetOptions{workers: 1, config: func(c *router.Config) {
				c.Admission.RequestReadTimeout = 100 * time.Millisecond
			}})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st := silentCall(t, f, ctx, method)
			err := st.RecvMsg(new(kvgatev1.GenerateResponse))
			if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "--request-read-timeout") {
				t.Fatalf("a call that sent nothing: %v, want DEADLINE_EXCEEDED naming --request-read-timeout", err)
			}
			testutil.Eventually(t, "the call to be counted", func() bool {
				return counter(t, f, "kvgate_client_timeouts_total", "bound", "request_read") == 1
			})
			// The router still serves calls that send their request.
			f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 8), SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}})
		})
	}
}

// The read timeout costs a call no goroutine of its own: a call waiting for
// its request is one goroutine, its handler's, blocked in the read. (It was
// two: the request was read on a fresh goroutine while the handler waited
// for it or the timeout, which cost 5-10% of the router's CPU per request.)
// Goroutines are told apart by their stacks: those of the package server
// blocked in grpc-go's read.
func TestSilentCallsReadOnTheHandlersGoroutine(t *testing.T) {
	for _, method := range []string{"/kvgate.v1.Router/Generate", "/kvgate.v1.Router/Chat"} {
		t.Run(method[strings.LastIndex(method, "/")+1:], func(t *testing.T) {
			f := startFleet(t, fleetOptions{workers: 1, config: func(c *router.Config) {
				c.Admission.RequestReadTimeout = time.Minute
			}})
			held, release := context.WithCancel(context.Background())
			defer release()
			const silent = 5
			for range silent {
				silentCall(t, f, held, method)
			}
			testutil.Eventually(t, "the silent calls to reach the router", func() bool {
				return gauge(t, f, "kvgate_requests_awaiting_message") == silent
			})
			var reading, elsewhere []string
			for _, g := range goroutineStacks() {
				if !strings.Contains(g, "google.golang.org/grpc.(*serverStream).RecvMsg") || !strings.Contains(g, "github.com/kvgate/kvgate/server.") {
					continue
				}
				if strings.Contains(g, "github.com/kvgate/kvgate/server.(*admittedStream).RecvMsg") {
					reading = append(reading, g)
				} else {
					elsewhere = append(elsewhere, g)
				}
			}
			if len(reading) != silent || len(elsewhere) != 0 {
				t.Fatalf("%d silent calls: %d requests read on their handler's goroutine, %d on goroutines of their own, want %d and 0; first of those:\n%s",
					silent, len(reading), len(elsewhere), silent, strings.Join(elsewhere[:min(1, len(elsewhere))], ""))
			}
		})
	}
}

// goroutineStacks returns the stack of every goroutine, one string each.
func goroutineStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

package server

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A Generate or Chat call must send its request within
// --request-read-timeout. Its handler, blocked in RecvMsg, cannot return
// before the read does; and ending the stream's context from outside would
// not do, since grpc-go's RecvMsg answers a read that fails with the
// failure's own status (CANCELED) before the handler can say why. So the
// timer answers the call itself: it writes DEADLINE_EXCEEDED with
// readTimeout's message as the stream's status, which ends the stream and
// its context; the blocked read then returns, its own status write finds the
// stream done and sends nothing, and the handler ends with readTimeout, which
// the interceptors log and count as the same status. grpc-go's transport
// supports a status written while another goroutine reads (it cancels the
// stream's context for that). A timer is no goroutine until it fires, where
// reading on a goroutine of its own started one per call and grew its stack
// to decode the request; the request's arrival stops the timer, so the rest
// of the call is not bounded by it.

// statusWriter is the transport stream grpc-go puts in a call's context
// (grpc.ServerTransportStreamFromContext): its WriteStatus ends the call
// with a status, from any goroutine. The method is not in the
// grpc.ServerTransportStream interface, so it is asserted;
// TestRequestReadTimeoutEndsSilentCalls fails if a grpc-go release drops it.
type statusWriter interface {
	WriteStatus(*status.Status) error
}

// readWithin receives one message, ending the call with DEADLINE_EXCEEDED
// when it has not arrived within d (0: no limit), and then returning
// readTimeout whatever the read returned.
func readWithin(ss grpc.ServerStream, m any, d time.Duration) error {
	if d <= 0 {
		return ss.RecvMsg(m)
	}
	w, ok := grpc.ServerTransportStreamFromContext(ss.Context()).(statusWriter)
	if !ok {
		// Not a stream of grpc-go's server (a test's fake): nothing but
		// the handler could end it.
		return ss.RecvMsg(m)
	}
	t := time.AfterFunc(d, func() { _ = w.WriteStatus(status.New(codes.DeadlineExceeded, readTimeout(d).Error())) })
	err := ss.RecvMsg(m)
	if !t.Stop() {
		// The status is written: the read ended with the stream, or the
		// request came as the timer fired and the call is over anyway.
		return readTimeout(d)
	}
	return err
}

// readTimeout is a request message that did not arrive in time. It is a
// deadline, the call's own, so it unwraps to context.DeadlineExceeded and
// the edge answers DEADLINE_EXCEEDED with this message.
type readTimeout time.Duration

func (e readTimeout) Error() string {
	return fmt.Sprintf("the request message did not arrive within %v of the call's start (--request-read-timeout); send it as the call opens",
		time.Duration(e))
}

func (readTimeout) Unwrap() error { return context.DeadlineExceeded }

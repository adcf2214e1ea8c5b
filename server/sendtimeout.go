package server

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultStreamSendTimeout is --stream-send-timeout's default: the bound
// nginx puts on a response write by default (send_timeout, 60 s, between
// two successive writes). A client that has taken nothing of its answer
// for a minute is not reading it.
const DefaultStreamSendTimeout = time.Minute

// A client that opens a stream and stops reading it fills HTTP/2's flow
// control window, and the router's next send blocks in grpc-go's SendMsg.
// The pipeline, blocked in that send, stops reading the engine's stream, so
// the engine holds the request's slot and KV, and the call its admission
// place for as long as the client keeps its connection open: a handful of
// such clients could take every place. (The engine's stream then looked
// idle, and --stream-idle-timeout failed it as the worker's fault; the
// relay no longer times the engine while it sends.) So every message must
// be taken within --stream-send-timeout. The handler cannot end a send it
// is blocked in, so a timer armed around each send does what the read
// timeout's does (see readWithin): it writes DEADLINE_EXCEEDED as the
// stream's status, which cancels the stream's context and with it the
// blocked send (grpc-go's transport wakes a writer waiting for quota when
// its stream ends). The pipeline then sees its context end, aborts the
// engine's request and returns, and the interceptor gives back the
// admission place. What the transport had already queued for the client (a
// stream's write quota of payload, 64 KiB in grpc-go, and each queued
// message's own overhead: about 0.3 MB a stream of one-token chunks in
// scripts/attack/results/heap-3r-2026-12-02.md) stays with the connection
// until the client reads it or the connection closes; the status follows
// it. The bound is per message, not per answer: grpc-go queues a message
// whole once the stream's write quota is not spent, so a send waits only
// for the client to take what was sent before it. A client that keeps
// reading is cut only if one message (prompt log-probabilities are the
// largest) takes it longer than the bound to read.

// sendBound is one call's send timeout, used by the goroutine that sends
// the call's messages.
type sendBound struct {
	d     time.Duration // 0: no bound
	timer *time.Timer   // made at the first send
	// expired: the bound ended the call. The timer runs only during a
	// send, so it fired exactly when a send's Stop found it gone.
	expired bool
}

// within sends m on ss, ending the call with DEADLINE_EXCEEDED when the
// send has not completed within the bound, and then returning sendTimeout
// whatever the send returned.
func (b *sendBound) within(ss grpc.ServerStream, m any) error {
	if b.d <= 0 {
		return ss.SendMsg(m)
	}
	if b.timer == nil {
		w, ok := grpc.ServerTransportStreamFromContext(ss.Context()).(statusWriter)
		if !ok {
			// Not a stream of grpc-go's server (a test's fake): nothing
			// but the handler could end it.
			b.d = 0
			return ss.SendMsg(m)
		}
		d := b.d
		b.timer = time.AfterFunc(d, func() {
			_ = w.WriteStatus(status.New(codes.DeadlineExceeded, sendTimeout(d).Error()))
		})
	} else {
		b.timer.Reset(b.d)
	}
	err := ss.SendMsg(m)
	if !b.timer.Stop() {
		// The status is written: the send ended with the stream, or it
		// completed as the timer fired and the call is over anyway.
		b.expired = true
		return sendTimeout(b.d)
	}
	return err
}

// stop releases the timer when the call ends.
func (b *sendBound) stop() {
	if b.timer != nil {
		b.timer.Stop()
	}
}

// sendTimeout is a stream message the client did not take in time. Like
// readTimeout it unwraps to context.DeadlineExceeded, so the edge answers
// DEADLINE_EXCEEDED with this message.
type sendTimeout time.Duration

func (e sendTimeout) Error() string {
	return fmt.Sprintf("the client took no message of the answer within %v (--stream-send-timeout): a stream must be read as it arrives; "+
		"the call was ended and its engine request aborted", time.Duration(e))
}

func (sendTimeout) Unwrap() error { return context.DeadlineExceeded }

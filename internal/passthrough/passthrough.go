// Package passthrough is the least a gRPC router can do: a transparent relay that
// forwards every call to one upstream, message by message, without decoding
// a message or looking at it.
//
// It is the floor `kvgate bench --overhead --cpu` measures the router
// against: whatever a relay costs per request (HTTP/2 framing on two
// connections, a stream on each side, the goroutines and syscalls that move
// the bytes) any router built on grpc-go pays too, so the router's own cost
// is what it spends above this. It is not a production proxy: no deadlines
// of its own, no retries, no health, one upstream. (It is named for what it
// does, so that it is not mistaken for the router's own relay step, which
// decodes every message.)
package passthrough

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// New returns a server that relays every call it receives to upstream. The
// caller registers nothing on it and calls Serve.
func New(upstream *grpc.ClientConn) *grpc.Server {
	h := &handler{up: upstream}
	return grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnknownServiceHandler(h.relay))
}

type handler struct{ up *grpc.ClientConn }

// relay forwards one call: the client's metadata and messages up, the
// upstream's header, messages, trailer and status down.
func (h *handler) relay(_ any, down grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(down)
	if !ok {
		return status.Error(codes.Internal, "relay: the call has no method name")
	}
	ctx, cancel := context.WithCancel(down.Context())
	defer cancel()
	md, _ := metadata.FromIncomingContext(ctx)
	ctx = metadata.NewOutgoingContext(ctx, md)
	up, err := h.up.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method,
		grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return err
	}

	// Requests go up from a goroutine of their own. A failure there shows
	// below as the upstream's status; the goroutine ends with the call,
	// whose end cancels both streams.
	go forwardUp(down, up)

	if hdr, err := up.Header(); err == nil && len(hdr) > 0 {
		if err := down.SendHeader(hdr); err != nil {
			return err
		}
	}
	for {
		var m mem.BufferSlice
		if err := up.RecvMsg(&m); err != nil {
			down.SetTrailer(up.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		err := down.SendMsg(m)
		m.Free()
		if err != nil {
			return err
		}
	}
}

// forwardUp sends the client's messages upstream until the client
// half-closes (then the upstream is half-closed too) or either stream ends.
func forwardUp(down grpc.ServerStream, up grpc.ClientStream) {
	for {
		var m mem.BufferSlice
		if err := down.RecvMsg(&m); err != nil {
			if errors.Is(err, io.EOF) {
				_ = up.CloseSend()
			}
			return
		}
		err := up.SendMsg(m)
		m.Free()
		if err != nil {
			return
		}
	}
}

// rawCodec moves a message's bytes without decoding them: a message is a
// *mem.BufferSlice, handed on with a reference of its own.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(mem.BufferSlice)
	if !ok {
		return nil, status.Errorf(codes.Internal, "relay: cannot marshal %T", v)
	}
	m.Ref()
	return m, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*mem.BufferSlice)
	if !ok {
		return status.Errorf(codes.Internal, "relay: cannot unmarshal into %T", v)
	}
	data.Ref()
	*m = data
	return nil
}

func (rawCodec) Name() string { return "proto" }

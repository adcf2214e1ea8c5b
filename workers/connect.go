package workers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
)

// DefaultConnectTimeout bounds protocol detection and the model-information
// calls Connect makes when ConnectOptions.Timeout is zero.
const DefaultConnectTimeout = 5 * time.Second

// ConnectOptions says how to reach one worker.
type ConnectOptions struct {
	// Protocol is the engine's protocol; ProtocolUnknown asks the engine.
	Protocol Protocol
	Role     Role
	// DialOptions replace the default, which is plaintext (engines' gRPC
	// servers listen without TLS inside the cluster).
	DialOptions []grpc.DialOption
	// Timeout bounds detection and the information calls; 0 means
	// DefaultConnectTimeout.
	Timeout time.Duration
}

// Connect dials the engine at addr (grpc://host:port or host:port), detects its
// protocol unless opts names one, reads its model information and returns a
// healthy Worker that owns the connection (Worker.Close closes it). Every error
// names the address; an engine that cannot be reached yields an error whose
// gRPC code is UNAVAILABLE.
func Connect(ctx context.Context, addr string, opts ConnectOptions) (*Worker, error) {
	url, target, err := ParseAddress(addr)
	if err != nil {
		return nil, err
	}
	dial := opts.DialOptions
	if len(dial) == 0 {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}

	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", url, err)
	}
	w, err := connect(ctx, conn, url, opts.Protocol, opts.Role, timeout)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return w, nil
}

func connect(ctx context.Context, conn *grpc.ClientConn, url string, proto Protocol, role Role, timeout time.Duration) (*Worker, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	if proto == ProtocolUnknown {
		p, err := Detect(ctx, conn)
		if err != nil {
			return nil, connectError(url, "detecting its protocol", err)
		}
		proto = p
	}
	b, err := NewBackend(proto, conn)
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", url, err)
	}
	info, err := b.Info(ctx)
	if err != nil {
		return nil, connectError(url, "reading "+proto.String()+" model information", err)
	}
	return NewWorker(url, proto, role, info, b, conn.Close), nil
}

// NewBackend returns the adapter for protocol p over conn.
func NewBackend(p Protocol, conn grpc.ClientConnInterface) (Backend, error) {
	switch p {
	case ProtocolSGLang:
		return NewSGLangBackend(conn), nil
	case ProtocolVLLM:
		return NewVLLMBackend(conn), nil
	}
	return nil, fmt.Errorf("no adapter for protocol %s", p)
}

// ErrUnknownEngine is Detect's answer for a server that implements neither
// engine protocol.
var ErrUnknownEngine = errors.New("the server speaks neither sglang.grpc.scheduler.SglangScheduler nor vllm.grpc.engine.VllmEngine")

// Detect asks the engine behind conn which protocol it speaks, by calling each
// protocol's GetModelInfo in turn (SGLang first): a gRPC server answers
// UNIMPLEMENTED for a service it does not have, so a success identifies the
// protocol and UNIMPLEMENTED moves on to the next. Any other error (the engine
// is unreachable, or too slow for ctx) is returned, since it says nothing about
// the protocol. A server with neither service yields ErrUnknownEngine.
func Detect(ctx context.Context, conn grpc.ClientConnInterface) (Protocol, error) {
	_, err := sglang.NewSglangSchedulerClient(conn).GetModelInfo(ctx, &sglang.GetModelInfoRequest{})
	if err == nil {
		return ProtocolSGLang, nil
	}
	if status.Code(err) != codes.Unimplemented {
		return ProtocolUnknown, err
	}
	_, err = vllm.NewVllmEngineClient(conn).GetModelInfo(ctx, &vllm.GetModelInfoRequest{})
	if err == nil {
		return ProtocolVLLM, nil
	}
	if status.Code(err) != codes.Unimplemented {
		return ProtocolUnknown, err
	}
	return ProtocolUnknown, ErrUnknownEngine
}

// connectError names the worker and what Connect was doing, and says in plain
// words what the transport errors people meet most often mean, keeping the
// gRPC status (and so status.Code) of err.
func connectError(url, doing string, err error) error {
	switch status.Code(err) {
	case codes.Unavailable:
		return fmt.Errorf("worker %s unreachable (%s): %w", url, doing, err)
	case codes.DeadlineExceeded:
		return fmt.Errorf("worker %s did not answer in time (%s): %w", url, doing, err)
	}
	return fmt.Errorf("worker %s: %s: %w", url, doing, err)
}

package server

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/fault"
)

// faultCodes is the one table from what went wrong to what a gRPC client
// sees. The OpenAI front maps these codes on to HTTP statuses, so it is that
// front's table too.
var faultCodes = [...]codes.Code{
	fault.Bug:             codes.Internal,
	fault.Invalid:         codes.InvalidArgument,
	fault.TooLarge:        codes.ResourceExhausted,
	fault.Busy:            codes.ResourceExhausted,
	fault.NotFound:        codes.NotFound,
	fault.Precondition:    codes.FailedPrecondition,
	fault.Unavailable:     codes.Unavailable,
	fault.Unsupported:     codes.Unimplemented,
	fault.Corrupt:         codes.DataLoss,
	fault.Unauthenticated: codes.Unauthenticated,
	fault.Exists:          codes.AlreadyExists,
}

// statusOf is where an error becomes the status a client sees. A fault keeps
// its whole message (with what callers wrapped around it); a status that came
// from elsewhere (an engine's, relayed, or grpc-go's own) is kept; a context
// error is the client's cancel or deadline; anything else is kvgate's bug.
func statusOf(err error) error {
	if err == nil {
		return nil
	}
	if f, ok := fault.As(err); ok {
		code := codes.Internal
		if int(f.Kind) < len(faultCodes) {
			code = faultCodes[f.Kind]
		}
		return status.Error(code, err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, err.Error())
}

// edgeUnary and edgeStream apply statusOf to what a handler returns. They
// sit inside the tracing, logging and metrics interceptors, which record the
// status the client receives.
func edgeUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	return resp, statusOf(err)
}

func edgeStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return statusOf(handler(srv, ss))
}

package server

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/fault"
)

func TestStatusOf(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		code    codes.Code
		message string
	}{
		{"no error", nil, codes.OK, ""},
		{"a field out of bounds", fault.Invalidf("max_new_tokens", "max_new_tokens 0 is below 1"),
			codes.InvalidArgument, "max_new_tokens 0 is below 1"},
		{"a limit", fault.Fieldf(fault.TooLarge, "input_ids", "too many"), codes.ResourceExhausted, "too many"},
		{"the router is full", fault.Newf(fault.Busy, "queue full"), codes.ResourceExhausted, "queue full"},
		{"an unknown model", fault.Fieldf(fault.NotFound, "model", "no model m"), codes.NotFound, "no model m"},
		{"a fleet that cannot serve it", fault.Newf(fault.Precondition, "no decode worker"), codes.FailedPrecondition, "no decode worker"},
		{"no worker now", fault.Newf(fault.Unavailable, "all down"), codes.Unavailable, "all down"},
		{"not implemented", fault.Newf(fault.Unsupported, "no embeddings"), codes.Unimplemented, "no embeddings"},
		{"a corrupt engine answer", fault.Newf(fault.Corrupt, "id 9 outside the vocabulary"), codes.DataLoss, "id 9 outside the vocabulary"},
		{"no credentials", fault.Newf(fault.Unauthenticated, "no key"), codes.Unauthenticated, "no key"},
		{"already there", fault.Fieldf(fault.Exists, "address", "worker w exists"), codes.AlreadyExists, "worker w exists"},
		{"a request message that never came", readTimeout(time.Second), codes.DeadlineExceeded,
			"the request message did not arrive within 1s of the call's start (--request-read-timeout); send it as the call opens"},
		{"a fault with context around it", fmt.Errorf("chat: %w", fault.Invalidf("messages", "no messages")),
			codes.InvalidArgument, "chat: no messages"},
		{"a fault with an unknown kind is a bug", &fault.Error{Kind: 200, Msg: "odd"}, codes.Internal, "odd"},
		{"an engine's status is relayed", status.Error(codes.OutOfRange, "engine: prompt too long"),
			codes.OutOfRange, "engine: prompt too long"},
		{"the client cancelled", fmt.Errorf("relay: %w", context.Canceled), codes.Canceled, "relay: context canceled"},
		{"the client's deadline", context.DeadlineExceeded, codes.DeadlineExceeded, "context deadline exceeded"},
		{"anything else is kvgate's bug", errors.New("nil map"), codes.Internal, "nil map"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := status.Convert(statusOf(tt.err))
			if st.Code() != tt.code || st.Message() != tt.message {
				t.Errorf("statusOf = %v %q, want %v %q", st.Code(), st.Message(), tt.code, tt.message)
			}
		})
	}
}

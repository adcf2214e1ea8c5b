package pd

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/fault"
)

// TestEngineFault: what a leg's engine answered is the engine's failure
// (a fault.Unavailable, which the router may retry on another pair) unless
// it is about the request or the caller, which is relayed unchanged.
func TestEngineFault(t *testing.T) {
	precondition := fault.Newf(fault.Precondition, "no kv_transfer_params_json")
	tests := []struct {
		name     string
		err      error
		wantKind fault.Kind // fault.Bug: no fault, relayed
		wantCode codes.Code // the engine's code, still readable
	}{
		{"internal error", status.Error(codes.Internal, "boom"), fault.Unavailable, codes.Internal},
		{"engine gone", status.Error(codes.Unavailable, "gone"), fault.Unavailable, codes.Unavailable},
		{"stream cut without a status", errors.New("no status"), fault.Unavailable, codes.Unknown},
		{"request invalid", status.Error(codes.InvalidArgument, "prompt too long"), fault.Bug, codes.InvalidArgument},
		{"cancelled on the wire", status.Error(codes.Canceled, "cancelled"), fault.Bug, codes.Canceled},
		{"caller gone", context.Canceled, fault.Bug, codes.Unknown},
		{"a fault already", precondition, fault.Precondition, codes.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			le := &LegError{Leg: "prefill", Worker: "grpc://p:1", Err: engineFault(tt.err)}
			wrapped := fmt.Errorf("dispatch: %w", le)
			kind, _ := fault.KindOf(wrapped)
			if kind != tt.wantKind {
				t.Errorf("fault.KindOf = %v, want %v", kind, tt.wantKind)
			}
			if !errors.Is(wrapped, tt.err) {
				t.Errorf("errors.Is does not reach %v", tt.err)
			}
			if tt.wantCode != codes.Unknown {
				if got := status.Code(wrapped); got != tt.wantCode {
					t.Errorf("status.Code = %v, want the engine's %v", got, tt.wantCode)
				}
			}
		})
	}
}

package fault_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/kvgate/kvgate/fault"
)

func TestFaults(t *testing.T) {
	wrapped := fault.Newf(fault.Corrupt, "engine answer: %w", io.ErrUnexpectedEOF)
	tests := []struct {
		name      string
		err       error
		wantKind  fault.Kind
		wantFault bool
		wantField string
		wantMsg   string
		wantIs    error
	}{
		{"a field out of bounds", fault.Invalidf("sampling_params.temperature", "sampling_params.temperature %v is above %v", 3, 2),
			fault.Invalid, true, "sampling_params.temperature", "sampling_params.temperature 3 is above 2", nil},
		{"a limit", fault.Fieldf(fault.TooLarge, "input_ids", "%d prompt tokens exceed the limit of %d", 9, 8),
			fault.TooLarge, true, "input_ids", "9 prompt tokens exceed the limit of 8", nil},
		{"a cause kept", wrapped, fault.Corrupt, true, "", "engine answer: unexpected EOF", io.ErrUnexpectedEOF},
		{"a fault wrapped by a caller", fmt.Errorf("worker w1: %w", fault.Newf(fault.Unavailable, "not connected")),
			fault.Unavailable, true, "", "worker w1: not connected", nil},
		{"no fault is a bug", errors.New("nil map"), fault.Bug, false, "", "nil map", nil},
		{"nil", nil, fault.Bug, false, "", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kind, ok := fault.KindOf(tt.err)
			if kind != tt.wantKind || ok != tt.wantFault {
				t.Errorf("KindOf = %v, %v; want %v, %v", kind, ok, tt.wantKind, tt.wantFault)
			}
			if f, ok := fault.As(tt.err); ok && f.Field != tt.wantField {
				t.Errorf("Field = %q, want %q", f.Field, tt.wantField)
			}
			if tt.err != nil && tt.err.Error() != tt.wantMsg {
				t.Errorf("Error() = %q, want %q", tt.err.Error(), tt.wantMsg)
			}
			if tt.wantIs != nil && !errors.Is(tt.err, tt.wantIs) {
				t.Errorf("errors.Is(%v, %v) = false", tt.err, tt.wantIs)
			}
		})
	}
}

func TestKindNames(t *testing.T) {
	for k := fault.Bug; k <= fault.Unauthenticated; k++ {
		if s := k.String(); s == "" || s[0] == 'K' {
			t.Errorf("kind %d has no name: %q", k, s)
		}
	}
}

package workers

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TensorRT-LLM's finish reasons (its CompletionOutput's, and the
// servicer's "error" for a request without output) in the router's terms.
func TestTRTLLMFinish(t *testing.T) {
	for _, tc := range []struct {
		engine, want string
		code         codes.Code
	}{
		{"stop", "stop", codes.OK},
		{"length", "length", codes.OK},
		{"stop_word", "stop", codes.OK},
		{"cancelled", "abort", codes.OK},
		{"timeout", "abort", codes.OK},
		{"error", "", codes.Unavailable},
		{"", "", codes.OK}, // passed through as the engine sent it
	} {
		got, err := trtllmFinish(tc.engine, "r1")
		if got != tc.want || status.Code(err) != tc.code {
			t.Errorf("finish_reason %q = %q, %v; want %q, %v", tc.engine, got, err, tc.want, tc.code)
		}
	}
}

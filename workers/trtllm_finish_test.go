package workers

import (
	"testing"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
)

// TensorRT-LLM's finish reasons (its CompletionOutput's, and the
// servicer's "error" for a request without output) in the router's terms.
func TestTRTLLMFinish(t *testing.T) {
	for _, tc := range []struct {
		engine, want string
		fails        bool // an Unavailable fault: the worker failed
	}{
		{"stop", "stop", false},
		{"length", "length", false},
		{"stop_word", "stop", false},
		{"cancelled", "abort", false},
		{"timeout", "abort", false},
		{"error", "", true},
		{"", "", false}, // passed through as the engine sent it
	} {
		got, err := trtllmFinish(tc.engine, "r1")
		if got != tc.want || (err != nil) != tc.fails || (tc.fails && !testutil.IsFault(err, fault.Unavailable)) {
			t.Errorf("finish_reason %q = %q, %v; want %q, failing %v", tc.engine, got, err, tc.want, tc.fails)
		}
	}
}

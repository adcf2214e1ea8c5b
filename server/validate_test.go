package server

import (
	"context"
	"math"
	"strings"
	"testing"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/pipeline"
)

// TestValidationNamesTheField: every check a request passes before it
// reaches a worker refuses it with an invalid-request fault that names the
// field at fault, so that each front can point at it (OpenAI's "param") and
// the edge alone decides the wire code.
func TestValidationNamesTheField(t *testing.T) {
	f32 := func(v float32) *float32 { return &v }
	u32 := func(v uint32) *uint32 { return &v }
	i32 := func(v int32) *int32 { return &v }
	tests := []struct {
		name  string
		err   error
		field string
		msg   string // a part of the message
	}{
		{"a temperature that is not a number",
			validateSampling(&kvgatev1.SamplingParams{Temperature: f32(float32(math.NaN()))}),
			"sampling_params.temperature", "must be a finite number"},
		{"a top_p out of its interval", validateSampling(&kvgatev1.SamplingParams{TopP: f32(0)}),
			"sampling_params.top_p", "must be in (0, 1]"},
		{"a top_k below -1", validateSampling(&kvgatev1.SamplingParams{TopK: i32(-2)}),
			"sampling_params.top_k", "-1 or 0"},
		{"max_new_tokens zero", validateSampling(&kvgatev1.SamplingParams{MaxNewTokens: u32(0)}),
			"sampling_params.max_new_tokens", "at least 1"},
		{"min_new_tokens above max_new_tokens",
			validateSampling(&kvgatev1.SamplingParams{MinNewTokens: 5, MaxNewTokens: u32(4)}),
			"sampling_params.min_new_tokens", "exceeds max_new_tokens"},
		{"too many stop strings", validateSampling(&kvgatev1.SamplingParams{Stop: make([]string, maxStopStrings+1)}),
			"sampling_params.stop", "the limit is 64"},
		{"an empty stop string", validateSampling(&kvgatev1.SamplingParams{Stop: []string{"a", ""}}),
			"sampling_params.stop[1]", "is empty"},
		{"a long stop string", validateSampling(&kvgatev1.SamplingParams{Stop: []string{strings.Repeat("x", maxStopStringBytes+1)}}),
			"sampling_params.stop[0]", "the limit is 1024"},
		{"too many stop token ids", validateSampling(&kvgatev1.SamplingParams{StopTokenIds: make([]uint32, maxStopTokenIDs+1)}),
			"sampling_params.stop_token_ids", "the limit is 1024"},
		{"a long request_id", jobErr(newJob(context.Background(), strings.Repeat("r", maxRequestIDBytes+1), nil, false)),
			"request_id", "the limit is 256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ok := fault.As(tt.err)
			if !ok || f.Kind != fault.Invalid || f.Field != tt.field || !strings.Contains(f.Msg, tt.msg) {
				t.Errorf("got %v (%+v); want an invalid-request fault about %s saying %q", tt.err, f, tt.field, tt.msg)
			}
		})
	}
}

func jobErr(_ *pipeline.Job, err error) error { return err }

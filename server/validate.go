package server

import (
	"fmt"
	"math"

	"github.com/kvgate/kvgate/answer"
	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
)

// maxRequestIDBytes bounds client-chosen request ids, which travel to workers
// and into logs and metrics.
const maxRequestIDBytes = 256

// Limits on what one request may ask the router to hold or scan. Each check
// runs before any expensive work.
const (
	// maxStopStrings bounds sampling_params.stop: every stop string is
	// matched against every output token.
	maxStopStrings = 64
	// maxStopStringBytes bounds each stop string; the detokenizer holds
	// back up to that much text.
	maxStopStringBytes = 1024
	// maxStopTokenIDs bounds sampling_params.stop_token_ids.
	maxStopTokenIDs = 1024
)

// invalid is an INVALID_ARGUMENT status for the files whose conversion to
// fault errors is under way elsewhere (Chat's answer shaping, Explain); new
// code returns fault.Invalidf, which names the field.

// floatRule bounds one optional float sampling field.
type floatRule struct {
	name     string
	v        *float32
	min, max float64
	openMin  bool // min itself is not allowed
}

func validateSampling(sp *kvgatev1.SamplingParams) error {
	if sp == nil {
		return nil
	}
	rules := []floatRule{
		{name: "temperature", v: sp.Temperature, min: 0, max: math.Inf(1)},
		{name: "top_p", v: sp.TopP, min: 0, max: 1, openMin: true},
		{name: "min_p", v: sp.MinP, min: 0, max: 1},
		{name: "frequency_penalty", v: sp.FrequencyPenalty, min: -2, max: 2},
		{name: "presence_penalty", v: sp.PresencePenalty, min: -2, max: 2},
		{name: "repetition_penalty", v: sp.RepetitionPenalty, min: 0, max: 2, openMin: true},
	}
	for _, r := range rules {
		if r.v == nil {
			continue
		}
		v := float64(*r.v)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fault.Invalidf("sampling_params."+r.name, "sampling_params.%s is %v; it must be a finite number", r.name, v)
		}
		if v < r.min || (r.openMin && v == r.min) || v > r.max {
			return fault.Invalidf("sampling_params."+r.name, "sampling_params.%s is %v; it must be in %s", r.name, v, r.interval())
		}
	}
	if sp.TopK != nil && *sp.TopK < -1 {
		return fault.Invalidf("sampling_params.top_k", "sampling_params.top_k is %d; it must be -1 or 0 (disabled) or at least 1", *sp.TopK)
	}
	if sp.MaxNewTokens != nil && *sp.MaxNewTokens == 0 {
		return fault.Invalidf("sampling_params.max_new_tokens", "sampling_params.max_new_tokens is 0; it must be at least 1 when set")
	}
	if sp.MaxNewTokens != nil && sp.MinNewTokens > *sp.MaxNewTokens {
		return fault.Invalidf("sampling_params.min_new_tokens", "sampling_params.min_new_tokens (%d) exceeds max_new_tokens (%d)", sp.MinNewTokens, *sp.MaxNewTokens)
	}
	if n := len(sp.Stop); n > maxStopStrings {
		return fault.Invalidf("sampling_params.stop", "sampling_params.stop has %d strings; the limit is %d", n, maxStopStrings)
	}
	for i, st := range sp.Stop {
		if st == "" {
			return fault.Invalidf(fmt.Sprintf("sampling_params.stop[%d]", i), "sampling_params.stop[%d] is empty; a stop string needs at least 1 character", i)
		}
		if len(st) > maxStopStringBytes {
			return fault.Invalidf(fmt.Sprintf("sampling_params.stop[%d]", i), "sampling_params.stop[%d] is %d bytes; the limit is %d", i, len(st), maxStopStringBytes)
		}
	}
	if n := len(sp.StopTokenIds); n > maxStopTokenIDs {
		return fault.Invalidf("sampling_params.stop_token_ids", "sampling_params.stop_token_ids has %d ids; the limit is %d", n, maxStopTokenIDs)
	}
	if err := answer.ValidateConstraint(sp); err != nil {
		return err
	}
	return answer.ValidateLogprobs(sp)
}

func (r floatRule) interval() string {
	lo, hi := "[", "]"
	if r.openMin {
		lo = "("
	}
	if math.IsInf(r.max, 1) {
		return fmt.Sprintf("%s%g, +inf)", lo, r.min)
	}
	return fmt.Sprintf("%s%g, %g%s", lo, r.min, r.max, hi)
}

package server

import (
	"context"
	"encoding/json"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/answer"
	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/workers"
)

// FuzzStructuredSampling feeds arbitrary constraints and log-probability
// fields through the checks a request passes before dispatch. They must
// never panic; a refusal is INVALID_ARGUMENT naming a sampling_params
// field; what passes is what the engines are promised: a JSON schema that
// is JSON, at most answer.MaxTopLogprobs alternatives, and the constraint handed
// to the adapters unchanged.
func FuzzStructuredSampling(f *testing.F) {
	f.Add(uint8(0), `{"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"type": "string"}}}`, uint32(3), true, false)
	f.Add(uint8(1), `^\d{4}-\d{2}-\d{2}$`, uint32(0), false, true)
	f.Add(uint8(2), "root ::= \"a\" | b\nb ::= [0-9]+", uint32(21), true, true)
	f.Add(uint8(3), `{"type": "structural_tag", "structures": [{"begin": "<f>", "schema": {}, "end": "</f>"}], "triggers": ["<f"]}`, uint32(1), false, false)
	f.Add(uint8(0), `{"type": "strin"}`, uint32(0), false, false)
	f.Fuzz(func(t *testing.T, kind uint8, value string, top uint32, lp, prompt bool) {
		sp := &kvgatev1.SamplingParams{Logprobs: lp, PromptLogprobs: prompt, TopLogprobs: top}
		switch kind % 4 {
		case 0:
			sp.Constraint = &kvgatev1.SamplingParams_JsonSchema{JsonSchema: value}
		case 1:
			sp.Constraint = &kvgatev1.SamplingParams_Regex{Regex: value}
		case 2:
			sp.Constraint = &kvgatev1.SamplingParams_Ebnf{Ebnf: value}
		case 3:
			sp.Constraint = &kvgatev1.SamplingParams_StructuralTag{StructuralTag: value}
		}
		_, err := newJob(context.Background(), "fuzz", sp, false)
		if err != nil {
			if status.Code(statusOf(err)) != codes.InvalidArgument {
				t.Fatalf("refused with %v", err)
			}
			return
		}
		c := answer.SamplingConstraint(sp)
		if c.Value != value || c.Kind == workers.NoConstraint {
			t.Fatalf("the constraint changed on its way to the adapters: %+v", c)
		}
		if c.Kind == workers.JSONSchema && !json.Valid([]byte(value)) {
			t.Fatalf("accepted a JSON schema that is not JSON: %q", value)
		}
		if top > answer.MaxTopLogprobs || top > 0 && !lp && !prompt {
			t.Fatalf("accepted top_logprobs %d (logprobs %v, prompt %v)", top, lp, prompt)
		}
	})
}

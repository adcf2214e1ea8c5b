package workers

// Structured-output constraints in each engine protocol's SamplingParams.
// Both protocols carry the constraint in a oneof; the router has validated
// Value, so the adapters pass it verbatim.

import (
	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/fault"
)

// errConstraintKind refuses a constraint kind the adapters do not know: a
// router bug, reported before anything is sent.
func errConstraintKind(k ConstraintKind) error {
	return fault.Invalidf("constraint", "unknown structured-output constraint kind %d", k)
}

// setSGLangConstraint puts c in SGLang's oneof constraint: regex (13),
// json_schema (14), ebnf_grammar (15), structural_tag (16); no constraint
// leaves it unset.
func setSGLangConstraint(p *sglang.SamplingParams, c Constraint) error {
	switch c.Kind {
	case NoConstraint:
	case JSONSchema:
		p.Constraint = &sglang.SamplingParams_JsonSchema{JsonSchema: c.Value}
	case Regex:
		p.Constraint = &sglang.SamplingParams_Regex{Regex: c.Value}
	case EBNF:
		p.Constraint = &sglang.SamplingParams_EbnfGrammar{EbnfGrammar: c.Value}
	case StructuralTag:
		p.Constraint = &sglang.SamplingParams_StructuralTag{StructuralTag: c.Value}
	default:
		return errConstraintKind(c.Kind)
	}
	return nil
}

// setVLLMConstraint puts c in vLLM's oneof constraint: json_schema (16),
// regex (17), grammar (18), structural_tag (19); no constraint leaves it
// unset.
func setVLLMConstraint(p *vllm.SamplingParams, c Constraint) error {
	switch c.Kind {
	case NoConstraint:
	case JSONSchema:
		p.Constraint = &vllm.SamplingParams_JsonSchema{JsonSchema: c.Value}
	case Regex:
		p.Constraint = &vllm.SamplingParams_Regex{Regex: c.Value}
	case EBNF:
		p.Constraint = &vllm.SamplingParams_Grammar{Grammar: c.Value}
	case StructuralTag:
		p.Constraint = &vllm.SamplingParams_StructuralTag{StructuralTag: c.Value}
	default:
		return errConstraintKind(c.Kind)
	}
	return nil
}

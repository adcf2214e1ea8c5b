package answer

import (
	"google.golang.org/protobuf/encoding/protojson"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/constraint"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/workers"
)

// constrained reports whether sampling_params carries a constraint.
func constrained(sp *kvgatev1.SamplingParams) bool { return sp.GetConstraint() != nil }

// ValidateConstraint checks sampling_params' constraint as the engines will
// compile it, so that one they would refuse (or choke on) is the client's
// INVALID_ARGUMENT here, naming the field, instead of an engine error.
func ValidateConstraint(sp *kvgatev1.SamplingParams) error {
	c := SamplingConstraint(sp)
	if c.Kind == workers.NoConstraint {
		return nil
	}
	var err error
	field := ""
	switch c.Kind {
	case workers.JSONSchema:
		field, err = "json_schema", constraint.CheckJSONSchema(c.Value, constraint.Limits{})
	case workers.Regex:
		field, err = "regex", constraint.CheckRegex(c.Value, constraint.Limits{})
	case workers.EBNF:
		field, err = "ebnf", constraint.CheckEBNF(c.Value, constraint.Limits{})
	case workers.StructuralTag:
		field, err = "structural_tag", constraint.CheckStructuralTag(c.Value, constraint.Limits{})
	}
	if err != nil {
		return fault.Invalidf("sampling_params."+field, "sampling_params.%s: %v", field, err)
	}
	return nil
}

// SamplingConstraint is sampling_params' constraint in the neutral type.
func SamplingConstraint(sp *kvgatev1.SamplingParams) workers.Constraint {
	switch c := sp.GetConstraint().(type) {
	case *kvgatev1.SamplingParams_JsonSchema:
		return workers.Constraint{Kind: workers.JSONSchema, Value: c.JsonSchema}
	case *kvgatev1.SamplingParams_Regex:
		return workers.Constraint{Kind: workers.Regex, Value: c.Regex}
	case *kvgatev1.SamplingParams_Ebnf:
		return workers.Constraint{Kind: workers.EBNF, Value: c.Ebnf}
	case *kvgatev1.SamplingParams_StructuralTag:
		return workers.Constraint{Kind: workers.StructuralTag, Value: c.StructuralTag}
	}
	return workers.Constraint{}
}

// jsonObjectSchema is what response_format json_object asks for: SGLang has
// no json_object field, and this schema means the same on both engines.
const jsonObjectSchema = `{"type":"object"}`

// responseFormat maps a Chat's response_format onto the shaper's
// constraint, as OpenAI's API defines it; sp are the request's
// sampling_params, which may constrain the answer instead.
func (s *Shaper) responseFormat(rf *kvgatev1.ResponseFormat, sp *kvgatev1.SamplingParams) error {
	var c workers.Constraint
	switch t := rf.GetType(); t {
	case "", "text":
		if rf.GetJsonSchema() != nil {
			return fault.Invalidf("response_format.type", "response_format.json_schema is set but response_format.type is %q; set type to \"json_schema\"", t)
		}
		return nil
	case "json_object":
		c = workers.Constraint{Kind: workers.JSONSchema, Value: jsonObjectSchema}
	case "json_schema":
		schema := rf.GetJsonSchema().GetSchema()
		if schema == nil {
			return fault.Invalidf("response_format.json_schema.schema", "response_format.type is \"json_schema\" but response_format.json_schema.schema is unset")
		}
		b, err := protojson.Marshal(schema)
		if err != nil {
			return fault.Invalidf("response_format.json_schema.schema", "response_format.json_schema.schema: %v", err)
		}
		if err := constraint.CheckJSONSchema(string(b), constraint.Limits{}); err != nil {
			return fault.Invalidf("response_format.json_schema.schema", "response_format.json_schema.schema: %v", err)
		}
		c = workers.Constraint{Kind: workers.JSONSchema, Value: string(b)}
	default:
		return fault.Invalidf("response_format.type", "response_format.type is %q; it must be \"text\", \"json_object\" or \"json_schema\"", t)
	}
	if constrained(sp) {
		return fault.Invalidf("response_format", "response_format and sampling_params both constrain the answer; give one")
	}
	s.constraint = c
	return nil
}

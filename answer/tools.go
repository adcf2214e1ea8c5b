package answer

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/constraint"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/parse"
	"github.com/kvgate/kvgate/workers"
)

// The values of --tool-call-parser and ChatRequest.tool_call_parser besides
// the formats' names.
const (
	// toolsAuto (the default) parses the format whose markers the model's
	// chat template writes (parse.DetectToolFormat), and leaves the text
	// raw when it writes none.
	toolsAuto = "auto"
	toolsNone = "none"
)

// ValidateToolCallParser checks a --tool-call-parser value.
func ValidateToolCallParser(name string) error {
	if name == "" || name == toolsAuto || name == toolsNone {
		return nil
	}
	_, err := parse.ToolFormatNamed(name)
	return err
}

// toolParser finds tool calls in an answer's content as it streams: a model
// family's format (parse.ToolParser), or the JSON a tool_choice constraint
// forced (namedCall, requiredCalls).
type toolParser interface {
	Push(delta string) parse.Delta
	Flush() parse.Delta
}

// The tool_choice modes.
const (
	choiceAuto     = "auto"
	choiceNone     = "none"
	choiceRequired = "required"
)

// chatTools decides how a Chat's answer is constrained and parsed, from its
// response_format, tools, tool_choice and tool_call_parser: the
// constraint, the tool-call parser and the special tokens the parser must
// see.
func (s *Shaper) chatTools(req *kvgatev1.ChatRequest, m Rules) error {
	if err := s.responseFormat(req.GetResponseFormat(), req.GetSamplingParams()); err != nil {
		return err
	}
	tc := req.GetToolChoice()
	mode, fn := tc.GetMode(), tc.GetFunction()
	switch mode {
	case "", choiceAuto, choiceNone, choiceRequired:
	default:
		return fault.Invalidf("tool_choice.mode", "tool_choice.mode is %q; it must be %q, %q or %q, or empty with tool_choice.function", mode, choiceAuto, choiceNone, choiceRequired)
	}
	if fn != "" && mode != "" {
		return fault.Invalidf("tool_choice", "tool_choice.mode (%q) and tool_choice.function (%q) are both set; name a function with an empty mode", mode, fn)
	}
	tools := req.GetTools()
	forced := mode == choiceRequired || fn != ""
	if forced && len(tools) == 0 {
		return fault.Invalidf("tool_choice", "tool_choice requires a tool call but tools is empty")
	}
	if forced {
		return s.forceTools(tools, fn, req.GetSamplingParams())
	}
	f, ok, err := toolFormat(m, req.ToolCallParser)
	if err != nil || !ok {
		return err
	}
	// A format that also carries the reasoning (harmony's channels) is
	// parsed whatever the tools: without it the answer is its raw channels.
	if !f.HandlesReasoning() && (len(tools) == 0 || mode == choiceNone) {
		return nil
	}
	opts := parse.ToolOptions{Tools: make([]string, 0, len(tools))}
	for _, t := range tools {
		opts.Tools = append(opts.Tools, t.GetFunction().GetName())
	}
	s.tools = func() toolParser { return parse.NewToolParser(f, opts) }
	if f.HandlesReasoning() {
		s.reasoning = nil
	}
	s.keepSpecial = markerIDs(m, f.Markers())
	return nil
}

// toolFormat is the request's tool_call_parser, else the router's; ok is
// false when calls are not parsed.
func toolFormat(m Rules, requested *string) (f parse.ToolFormat, ok bool, err error) {
	name := m.ToolCallParser
	if requested != nil {
		name = *requested
	}
	switch name {
	case toolsNone:
		return f, false, nil
	case "", toolsAuto:
		return m.ToolFormat, m.ToolFormatDetected, nil
	}
	if f, err = parse.ToolFormatNamed(name); err != nil {
		if requested != nil {
			return f, false, fault.Invalidf("tool_call_parser", "tool_call_parser: %v (or %q, %q)", err, toolsNone, toolsAuto)
		}
		return f, false, err // validated at start-up
	}
	return f, true, nil
}

// markerIDs are the special tokens among a format's markers: kept in the
// text the parser reads, though special tokens are otherwise skipped.
func markerIDs(m Rules, markers []string) []uint32 {
	if m.SpecialID == nil {
		return nil
	}
	var ids []uint32
	for _, mk := range markers {
		if id, ok := m.SpecialID(mk); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// forceTools enforces tool_choice "required" or a named function through a
// JSON schema constraint, as vLLM's OpenAI server does, and reads the
// answer as the JSON that constraint produces instead of a model family's
// format. The answer starts with the JSON, so no reasoning is parsed.
func (s *Shaper) forceTools(tools []*kvgatev1.Tool, fn string, sp *kvgatev1.SamplingParams) error {
	if s.constraint.Kind != workers.NoConstraint || constrained(sp) {
		return fault.Invalidf("tool_choice", "tool_choice requires a tool call, which kvgate enforces with a JSON schema, and the answer is already constrained (response_format or sampling_params); give one")
	}
	defs := make([]constraint.Tool, len(tools))
	for i, t := range tools {
		defs[i].Name = t.GetFunction().GetName()
		if p := t.GetFunction().GetParameters(); p != nil {
			b, err := protojson.Marshal(p)
			if err != nil {
				field := fmt.Sprintf("tools[%d].function.parameters", i)
				return fault.Invalidf(field, "%s: %v", field, err)
			}
			defs[i].Parameters = b
		}
	}
	var schema string
	var err error
	if fn != "" {
		schema, err = constraint.NamedToolSchema(defs, fn)
		s.tools = func() toolParser { return &namedCall{name: fn} }
	} else {
		schema, err = constraint.RequiredToolSchema(defs)
		s.tools = func() toolParser { return &requiredCalls{} }
	}
	if err != nil {
		return fault.Invalidf("tool_choice", "tool_choice: %v", err)
	}
	if err := constraint.CheckJSONSchema(schema, constraint.Limits{}); err != nil {
		return fault.Invalidf("tools", "tools: a parameters schema cannot be enforced: %v", err)
	}
	s.constraint = workers.Constraint{Kind: workers.JSONSchema, Value: schema}
	s.reasoning = nil
	return nil
}

// namedCall reads an answer forced to be one named function's arguments:
// the name is announced at once and the text streams as the arguments.
// Text that is not a JSON object in the end (an answer cut short by
// max_new_tokens) retracts the call and becomes content.
type namedCall struct {
	name      string
	announced bool
	args      strings.Builder
}

func (n *namedCall) Push(delta string) parse.Delta {
	n.args.WriteString(delta)
	d := parse.Delta{}
	if !n.announced {
		n.announced = true
		d.Calls = []parse.CallDelta{{Index: 0, Name: n.name, Arguments: delta}}
	} else if delta != "" {
		d.Calls = []parse.CallDelta{{Index: 0, Arguments: delta}}
	}
	return d
}

func (n *namedCall) Flush() parse.Delta {
	if jsonObject(n.args.String()) {
		return parse.Delta{}
	}
	return parse.Delta{Content: n.args.String(), Malformed: true, Calls: []parse.CallDelta{{Index: 0, Invalid: true}}}
}

// jsonObject reports whether s is one JSON object.
func jsonObject(s string) bool {
	t := strings.TrimSpace(s)
	return strings.HasPrefix(t, "{") && json.Valid([]byte(t))
}

// requiredCalls reads an answer forced to be a JSON array of calls. The
// array is parsed whole at the end: its calls are released then.
type requiredCalls struct{ text strings.Builder }

func (r *requiredCalls) Push(delta string) parse.Delta {
	r.text.WriteString(delta)
	return parse.Delta{}
}

func (r *requiredCalls) Flush() parse.Delta {
	calls, err := constraint.ParseRequiredToolOutput(r.text.String())
	if err != nil {
		return parse.Delta{Content: r.text.String(), Malformed: true}
	}
	d := parse.Delta{Calls: make([]parse.CallDelta, len(calls))}
	for i, c := range calls {
		d.Calls[i] = parse.CallDelta{Index: i, Name: c.Name, Arguments: c.Arguments}
	}
	return d
}

// callIDs names a request's tool calls: call_<hash of the request id>_<n>,
// n counting the calls announced, so that an id is never reused within a
// request, retracted calls included, and the same request id always gets
// the same ids.
type callIDs struct {
	base string
	next int
}

func newCallIDs(requestID string) callIDs {
	h := fnv.New64a()
	h.Write([]byte(requestID))
	return callIDs{base: fmt.Sprintf("call_%016x_", h.Sum64())}
}

func (c *callIDs) id() string {
	c.next++
	return fmt.Sprintf("%s%d", c.base, c.next-1)
}

// toolCall is one finished call as the completion carries it.
func toolCall(id string, c parse.Call) *kvgatev1.ToolCall {
	args := &structpb.Value{}
	if err := protojson.Unmarshal([]byte(c.Arguments), args); err != nil {
		// The parsers release only JSON objects as arguments; keep the text
		// rather than lose it, should one ever not be.
		args = structpb.NewStringValue(c.Arguments)
	}
	return &kvgatev1.ToolCall{Id: id, Type: "function", Function: &kvgatev1.FunctionCall{Name: c.Name, Arguments: args}}
}

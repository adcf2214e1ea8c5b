package constraint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Tool is a function the model may call, as the chat request declares it.
type Tool struct {
	Name string
	// Parameters is the JSON schema of the function's arguments; empty means
	// {"type":"object"}.
	Parameters []byte
}

// ToolCall is one call parsed from an answer generated under
// RequiredToolSchema.
type ToolCall struct {
	Name string
	// Arguments is the call's arguments as compact JSON object text, the
	// form an OpenAI tool_calls[].function.arguments carries.
	Arguments string
}

// RequiredToolSchema returns the JSON schema that enforces tool_choice
// "required" through structured output: the answer is a non-empty JSON array
// of calls, each {"name": <one of the tools' names>, "parameters": <that
// tool's parameters>}:
//
//	{"type":"array","minItems":1,"items":{"type":"object","anyOf":[
//	  {"properties":{"name":{"type":"string","enum":["get_weather"]},"parameters":{...}},
//	   "required":["name","parameters"]}, ...]}}
//
// This is the shape vLLM's OpenAI server builds for tool_choice "required"
// (_get_json_schema_from_tool in vllm/entrypoints/openai/protocol.py, checked
// with the search tool), so an answer parses the same way whichever engine
// produced it. One difference: vLLM lifts every tool's $defs to the top and
// refuses two tools that define the same name differently; here each tool's
// local references (those in schema positions, as CheckJSONSchema finds
// them; a const or enum value that looks like a reference is data and stays)
// are rewritten to point into the tool's own place in the combined schema,
// so tools never collide and any local reference keeps resolving.
//
// Errors: no tools, a tool without a name, two tools with one name, or a
// parameters schema CheckJSONSchema refuses (the message names the tool).
func RequiredToolSchema(tools []Tool) (string, error) {
	if len(tools) == 0 {
		return "", errors.New(`tool_choice "required" needs at least one tool`)
	}
	seen := map[string]bool{}
	b := []byte(`{"type":"array","minItems":1,"items":{"type":"object","anyOf":[`)
	for i, t := range tools {
		if t.Name == "" {
			return "", fmt.Errorf("tool %d has no name", i)
		}
		if !utf8.ValidString(t.Name) {
			return "", fmt.Errorf("tool %d's name is not valid UTF-8", i)
		}
		if seen[t.Name] {
			return "", fmt.Errorf("tool %s is declared twice", quoteShort(t.Name))
		}
		seen[t.Name] = true
		params, refs, err := toolParameters(t)
		if err != nil {
			return "", err
		}
		// Point each local reference at the tool's place in the combined
		// schema. The values are the parse's own, so rewriting them in place
		// touches nothing else.
		at := "/items/anyOf/" + strconv.Itoa(i) + "/properties/parameters"
		for _, r := range refs {
			if strings.HasPrefix(r.str, "#") {
				r.str = "#" + at + r.str[1:]
			}
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"properties":{"name":{"type":"string","enum":[`...)
		b = appendJSONString(b, t.Name)
		b = append(b, `]},"parameters":`...)
		b = appendJSON(b, params)
		b = append(b, `},"required":["name","parameters"]}`...)
	}
	b = append(b, `]}}`...)
	return string(b), nil
}

// NamedToolSchema returns the JSON schema for a tool_choice that names one
// function: the answer is that function's arguments object, so the schema is
// its parameters schema ({"type":"object"} when it declares none), as vLLM
// does for a named tool_choice.
func NamedToolSchema(tools []Tool, name string) (string, error) {
	for _, t := range tools {
		if t.Name == name {
			params, _, err := toolParameters(t)
			if err != nil {
				return "", err
			}
			return string(appendJSON(nil, params)), nil
		}
	}
	names := make([]string, 0, len(tools))
	for _, t := range tools {
		names = append(names, quoteShort(t.Name))
	}
	sort.Strings(names)
	if len(names) > 10 { // the message goes back in a gRPC status
		names = append(names[:10], fmt.Sprintf("and %d more", len(names)-10))
	}
	if len(names) == 0 {
		return "", fmt.Errorf("tool_choice names %s but the request declares no tools", quoteShort(name))
	}
	return "", fmt.Errorf("tool_choice names %s, which is not a declared tool (declared: %s)", quoteShort(name), strings.Join(names, ", "))
}

// toolParameters parses and checks a tool's parameters schema, and returns
// it with the $ref values in its schema positions.
func toolParameters(t Tool) (*jval, []*jval, error) {
	text := strings.TrimSpace(string(t.Parameters))
	if text == "" {
		text = `{"type":"object"}`
	}
	lim := Limits{}.withDefaults()
	if err := lim.checkSize("the parameters of tool "+quoteShort(t.Name), text); err != nil {
		return nil, nil, err
	}
	v, err := parseJSON(text, lim)
	var refs []*jval
	if err == nil {
		refs, err = walkSchema(v, "", lim)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("parameters of tool %s: %w", quoteShort(t.Name), err)
	}
	return v, refs, nil
}

// ParseRequiredToolOutput parses an answer generated under RequiredToolSchema
// into its calls, in order. It is an error when the answer is not a
// non-empty JSON array of objects each with a string "name" and an object
// "parameters" (other members are ignored, as the schema allows them).
func ParseRequiredToolOutput(answer string) ([]ToolCall, error) {
	var raw []map[string]json.RawMessage
	dec := json.NewDecoder(strings.NewReader(answer))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("tool calls: want a JSON array of {name, parameters} objects: %w", err)
	}
	if dec.More() {
		return nil, errors.New("tool calls: unexpected text after the JSON array")
	}
	if len(raw) == 0 {
		return nil, errors.New("tool calls: the array is empty (or null)")
	}
	calls := make([]ToolCall, 0, len(raw))
	for i, obj := range raw {
		var name string
		if n := bytes.TrimSpace(obj["name"]); len(n) == 0 || n[0] != '"' || json.Unmarshal(n, &name) != nil {
			return nil, fmt.Errorf("tool call %d: want a string name", i)
		}
		params := bytes.TrimSpace(obj["parameters"])
		if len(params) == 0 || params[0] != '{' {
			return nil, fmt.Errorf("tool call %d (%s): want an object of parameters", i, name)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, params); err != nil {
			return nil, fmt.Errorf("tool call %d (%s): %w", i, name, err)
		}
		calls = append(calls, ToolCall{Name: name, Arguments: buf.String()})
	}
	return calls, nil
}

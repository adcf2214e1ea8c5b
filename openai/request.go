package openai

import (
	"encoding/json"
	"math"
	"strconv"

	"google.golang.org/protobuf/types/known/structpb"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// sampling holds the fields chat and text completions share: OpenAI's,
// and the extensions vLLM and SGLang accept beside them (top_k, min_p,
// repetition_penalty, min_tokens, stop_token_ids, ignore_eos,
// skip_special_tokens, regex, ebnf). Range checks are the router's: it
// names the field and its limit.
type sampling struct {
	Model             string        `json:"model"`
	Stream            bool          `json:"stream"`
	StreamOptions     streamOptions `json:"stream_options"`
	Temperature       *float32      `json:"temperature"`
	TopP              *float32      `json:"top_p"`
	TopK              *int32        `json:"top_k"`
	MinP              *float32      `json:"min_p"`
	FrequencyPenalty  *float32      `json:"frequency_penalty"`
	PresencePenalty   *float32      `json:"presence_penalty"`
	RepetitionPenalty *float32      `json:"repetition_penalty"`
	MaxTokens         *uint32       `json:"max_tokens"`
	MinTokens         uint32        `json:"min_tokens"`
	Stop              stopList      `json:"stop"`
	StopTokenIDs      []uint32      `json:"stop_token_ids"`
	IgnoreEOS         bool          `json:"ignore_eos"`
	Seed              *int64        `json:"seed"`
	SkipSpecialTokens *bool         `json:"skip_special_tokens"`
	N                 *int          `json:"n"`
	Regex             *string       `json:"regex"`
	EBNF              *string       `json:"ebnf"`
	// Priority is the request's class in the router's wait queue, lower
	// served first (vLLM's field); it travels as kvgate-priority metadata.
	Priority *int `json:"priority"`
}

// maxPriority is the router's bound on a priority class, either way.
const maxPriority = 1000

// priorityMetadata is the kvgate-priority value the body's priority sets
// ("" when it sets none).
func (s *sampling) priorityMetadata() (string, error) {
	switch {
	case s.Priority == nil:
		return "", nil
	case *s.Priority < -maxPriority || *s.Priority > maxPriority:
		return "", invalidParam("priority", "priority is %d; it must be from %d to %d (lower is served first; default 0)", *s.Priority, -maxPriority, maxPriority)
	}
	return strconv.Itoa(*s.Priority), nil
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// params translates the shared fields; maxTokens is the bound the
// endpoint settled on (chat prefers max_completion_tokens).
func (s *sampling) params(maxTokens *uint32) (*kvgatev1.SamplingParams, error) {
	if s.N != nil && *s.N != 1 {
		return nil, invalidParam("n", "n is %d; kvgate generates one choice per request, so n must be 1 (send n requests: the router's prefix cache makes the shared prompt cheap)", *s.N)
	}
	p := &kvgatev1.SamplingParams{
		Temperature: s.Temperature, TopP: s.TopP, TopK: s.TopK, MinP: s.MinP,
		FrequencyPenalty: s.FrequencyPenalty, PresencePenalty: s.PresencePenalty, RepetitionPenalty: s.RepetitionPenalty,
		MaxNewTokens: maxTokens, MinNewTokens: s.MinTokens, Stop: s.Stop, StopTokenIds: s.StopTokenIDs,
		IgnoreEos: s.IgnoreEOS, SkipSpecialTokens: s.SkipSpecialTokens,
	}
	if s.Seed != nil {
		if *s.Seed < math.MinInt32 || *s.Seed > math.MaxInt32 {
			return nil, invalidParam("seed", "seed is %d; it must fit in 32 bits (%d to %d)", *s.Seed, math.MinInt32, math.MaxInt32)
		}
		seed := int32(*s.Seed)
		p.Seed = &seed
	}
	switch {
	case s.Regex != nil && s.EBNF != nil:
		return nil, invalidParam("regex", "give at most one of regex and ebnf")
	case s.Regex != nil:
		p.Constraint = &kvgatev1.SamplingParams_Regex{Regex: *s.Regex}
	case s.EBNF != nil:
		p.Constraint = &kvgatev1.SamplingParams_Ebnf{Ebnf: *s.EBNF}
	}
	return p, nil
}

// chatRequest is POST /v1/chat/completions' body.
type chatRequest struct {
	sampling
	Messages            []chatMessage   `json:"messages"`
	Tools               []tool          `json:"tools"`
	ToolChoice          *toolChoice     `json:"tool_choice"`
	ResponseFormat      *responseFormat `json:"response_format"`
	Logprobs            bool            `json:"logprobs"`
	TopLogprobs         *uint32         `json:"top_logprobs"`
	MaxCompletionTokens *uint32         `json:"max_completion_tokens"`
	ChatTemplateKwargs  map[string]any  `json:"chat_template_kwargs"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
}

type chatMessage struct {
	Role             string         `json:"role"`
	Content          messageContent `json:"content"`
	Name             string         `json:"name"`
	ToolCalls        []toolCall     `json:"tool_calls"`
	ToolCallID       string         `json:"tool_call_id"`
	ReasoningContent string         `json:"reasoning_content"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
		// Arguments is JSON text in a string, as OpenAI sends it; an
		// object is accepted too.
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		Parameters  map[string]any `json:"parameters"`
	} `json:"function"`
}

type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	} `json:"json_schema"`
}

// proto translates the request into kvgate's ChatRequest.
func (c *chatRequest) proto() (*kvgatev1.ChatRequest, error) {
	max := c.MaxCompletionTokens
	if max == nil {
		max = c.MaxTokens
	}
	sp, err := c.params(max)
	if err != nil {
		return nil, err
	}
	sp.Logprobs = c.Logprobs
	if c.TopLogprobs != nil {
		if !c.Logprobs && *c.TopLogprobs > 0 {
			return nil, invalidParam("top_logprobs", "top_logprobs needs logprobs: true")
		}
		sp.TopLogprobs = *c.TopLogprobs
	}
	req := &kvgatev1.ChatRequest{Model: c.Model, Stream: c.Stream, SamplingParams: sp, AddGenerationPrompt: c.AddGenerationPrompt}
	if len(c.Messages) == 0 {
		return nil, invalidParam("messages", "messages is required: a list of at least one message")
	}
	for _, m := range c.Messages {
		pm := &kvgatev1.ChatMessage{Role: m.Role, Content: string(m.Content), Name: m.Name, ToolCallId: m.ToolCallID, ReasoningContent: m.ReasoningContent}
		for _, tc := range m.ToolCalls {
			args, err := arguments(tc.Function.Arguments)
			if err != nil {
				return nil, err
			}
			typ := tc.Type
			if typ == "" {
				typ = "function"
			}
			pm.ToolCalls = append(pm.ToolCalls, &kvgatev1.ToolCall{Id: tc.ID, Type: typ, Function: &kvgatev1.FunctionCall{Name: tc.Function.Name, Arguments: args}})
		}
		req.Messages = append(req.Messages, pm)
	}
	for _, t := range c.Tools {
		fd := &kvgatev1.FunctionDefinition{Name: t.Function.Name, Description: t.Function.Description}
		if t.Function.Parameters != nil {
			if fd.Parameters, err = structpb.NewStruct(t.Function.Parameters); err != nil {
				return nil, invalidParam("tools.function.parameters", "tools.function.parameters: %v", err)
			}
		}
		typ := t.Type
		if typ == "" {
			typ = "function"
		}
		req.Tools = append(req.Tools, &kvgatev1.Tool{Type: typ, Function: fd})
	}
	if c.ToolChoice != nil {
		req.ToolChoice = &kvgatev1.ToolChoice{Mode: c.ToolChoice.mode, Function: c.ToolChoice.function}
	}
	if c.ChatTemplateKwargs != nil {
		if req.ChatTemplateKwargs, err = structpb.NewStruct(c.ChatTemplateKwargs); err != nil {
			return nil, invalidParam("chat_template_kwargs", "chat_template_kwargs: %v", err)
		}
	}
	if err := c.responseFormat(req); err != nil {
		return nil, err
	}
	return req, nil
}

// responseFormat maps response_format. A json_schema goes to
// sampling_params.json_schema as the client's own JSON text, so that the
// engine generates the properties in the client's order (the message form,
// a google.protobuf.Struct, would sort them).
func (c *chatRequest) responseFormat(req *kvgatev1.ChatRequest) error {
	rf := c.ResponseFormat
	if rf == nil {
		return nil
	}
	switch rf.Type {
	case "", "text":
		return nil
	case "json_object":
		req.ResponseFormat = &kvgatev1.ResponseFormat{Type: "json_object"}
		return nil
	case "json_schema":
		if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 || isNull(rf.JSONSchema.Schema) {
			return invalidParam("response_format.json_schema.schema", "response_format of type json_schema needs json_schema.schema, a JSON schema object")
		}
		if req.SamplingParams.Constraint != nil {
			return invalidParam("response_format", "give at most one of response_format, regex and ebnf")
		}
		req.SamplingParams.Constraint = &kvgatev1.SamplingParams_JsonSchema{JsonSchema: string(rf.JSONSchema.Schema)}
		return nil
	default:
		return invalidParam("response_format.type", "response_format.type is %s; it must be \"text\", \"json_object\" or \"json_schema\"", quote(rf.Type))
	}
}

// arguments reads a tool call's arguments: JSON text in a string (OpenAI's
// form, kept as text so the template sees the client's key order) or a
// JSON value.
func arguments(raw json.RawMessage) (*structpb.Value, error) {
	if len(raw) == 0 || isNull(raw) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return structpb.NewStringValue(s), nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, invalidParam("messages.tool_calls.function.arguments", "messages.tool_calls.function.arguments must be JSON text in a string")
	}
	pv, err := structpb.NewValue(v)
	if err != nil {
		return nil, invalidParam("messages.tool_calls.function.arguments", "messages.tool_calls.function.arguments: %v", err)
	}
	return pv, nil
}

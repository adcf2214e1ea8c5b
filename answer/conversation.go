package answer

import (
	"fmt"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/tokenize/template"
	"github.com/kvgate/kvgate/tokenize/textmodel"
)

// Conversation converts the request to the values a chat template sees:
// messages and tools as ordered maps, JSON fields as jsonvalues.go converts
// them (keys sorted, since a Struct has no order and templates print them
// with tojson).
func Conversation(req *kvgatev1.ChatRequest) (textmodel.Conversation, error) {
	c := textmodel.Conversation{AddGenerationPrompt: req.AddGenerationPrompt == nil || *req.AddGenerationPrompt}
	for i, m := range req.GetMessages() {
		msg := template.NewOrderedMap()
		msg.Set("role", m.GetRole())
		msg.Set("content", m.GetContent())
		if m.GetName() != "" {
			msg.Set("name", m.GetName())
		}
		if len(m.GetToolCalls()) > 0 {
			var calls []any
			for k, tc := range m.GetToolCalls() {
				fn := template.NewOrderedMap()
				fn.Set("name", tc.GetFunction().GetName())
				args, err := argumentsValue(tc.GetFunction().GetArguments(), fmt.Sprintf("messages[%d].tool_calls[%d].function.arguments", i, k))
				if err != nil {
					return c, err
				}
				fn.Set("arguments", args)
				call := template.NewOrderedMap()
				if tc.GetId() != "" {
					call.Set("id", tc.GetId())
				}
				call.Set("type", orDefault(tc.GetType(), "function"))
				call.Set("function", fn)
				calls = append(calls, call)
			}
			msg.Set("tool_calls", calls)
		}
		if m.GetToolCallId() != "" {
			msg.Set("tool_call_id", m.GetToolCallId())
		}
		if m.GetReasoningContent() != "" {
			msg.Set("reasoning_content", m.GetReasoningContent())
		}
		c.Messages = append(c.Messages, msg)
	}
	for i, t := range req.GetTools() {
		fn := template.NewOrderedMap()
		fn.Set("name", t.GetFunction().GetName())
		if d := t.GetFunction().GetDescription(); d != "" {
			fn.Set("description", d)
		}
		if p := t.GetFunction().GetParameters(); p != nil {
			params, err := structValue(p, fmt.Sprintf("tools[%d].function.parameters", i))
			if err != nil {
				return c, err
			}
			fn.Set("parameters", params)
		}
		tool := template.NewOrderedMap()
		tool.Set("type", orDefault(t.GetType(), "function"))
		tool.Set("function", fn)
		c.Tools = append(c.Tools, tool)
	}
	if kw := req.GetChatTemplateKwargs(); kw != nil {
		m, err := structValue(kw, "chat_template_kwargs")
		if err != nil {
			return c, err
		}
		c.Kwargs = m
	}
	return c, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

package openai

import (
	"bytes"
	"encoding/json"
	"strings"
)

// The OpenAI API lets several fields take one of a few shapes. Each such
// field has a type of its own here, whose UnmarshalJSON accepts exactly
// those shapes and otherwise names the field (encoding/json does not pass
// a field's name to its unmarshaler).

// isNull reports whether b is JSON null.
func isNull(b []byte) bool { return bytes.Equal(bytes.TrimSpace(b), []byte("null")) }

// stopList is "stop": a string or a list of strings.
type stopList []string

func (s *stopList) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		*s = nil
		return nil
	}
	var one string
	if json.Unmarshal(b, &one) == nil {
		*s = stopList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return &fieldError{"stop", "must be a string or a list of strings"}
	}
	*s = many
	return nil
}

// messageContent is a message's "content": a string, null, or a list of
// parts of which kvgate's text models take the text parts.
type messageContent string

func (c *messageContent) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		*c = ""
		return nil
	}
	var s string
	if json.Unmarshal(b, &s) == nil {
		*c = messageContent(s)
		return nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return &fieldError{"messages.content", "must be a string or a list of content parts"}
	}
	var sb strings.Builder
	for _, p := range parts {
		switch p.Type {
		case "text", "input_text":
			if p.Text == nil {
				return &fieldError{"messages.content", `a part of type "text" needs a string "text"`}
			}
			sb.WriteString(*p.Text)
		default:
			return &fieldError{"messages.content", "content parts of type " + quote(p.Type) + " are not supported: kvgate serves text models (use parts of type \"text\")"}
		}
	}
	*c = messageContent(sb.String())
	return nil
}

// toolChoice is "tool_choice": "auto", "none", "required", or
// {"type": "function", "function": {"name": ...}}.
type toolChoice struct {
	mode, function string
}

func (t *toolChoice) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		*t = toolChoice{}
		return nil
	}
	var s string
	if json.Unmarshal(b, &s) == nil {
		switch s {
		case "auto", "none", "required":
			*t = toolChoice{mode: s}
			return nil
		}
		return &fieldError{"tool_choice", "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}, not " + quote(s)}
	}
	var o struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(b, &o); err != nil || o.Function.Name == "" {
		return &fieldError{"tool_choice", "must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}"}
	}
	*t = toolChoice{function: o.Function.Name}
	return nil
}

// prompt is a completion's "prompt" or an embedding's "input": a string, a
// list of token ids, a list of strings, or a list of lists of token ids.
type prompt struct {
	texts []string
	ids   [][]uint32
	field string
}

func (p *prompt) unmarshal(b []byte, field string) error {
	*p = prompt{field: field}
	var s string
	if json.Unmarshal(b, &s) == nil {
		p.texts = []string{s}
		return nil
	}
	var ids []uint32
	if json.Unmarshal(b, &ids) == nil {
		p.ids = [][]uint32{ids}
		return nil
	}
	var texts []string
	if json.Unmarshal(b, &texts) == nil {
		p.texts = texts
		return nil
	}
	var batch [][]uint32
	if json.Unmarshal(b, &batch) == nil {
		p.ids = batch
		return nil
	}
	return &fieldError{field, "must be a string, a list of token ids (integers ≥ 0), a list of strings or a list of lists of token ids"}
}

// count is the number of prompts.
func (p prompt) count() int { return len(p.texts) + len(p.ids) }

// completionPrompt is /v1/completions' "prompt".
type completionPrompt struct{ prompt }

func (p *completionPrompt) UnmarshalJSON(b []byte) error { return p.unmarshal(b, "prompt") }

// embeddingInput is /v1/embeddings' "input".
type embeddingInput struct{ prompt }

func (p *embeddingInput) UnmarshalJSON(b []byte) error { return p.unmarshal(b, "input") }

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

package answer

import (
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/parse"
)

// The values of --reasoning-parser and ChatRequest.reasoning_parser besides
// the styles' names.
const (
	// reasoningAuto (the default) parses <think> blocks when the model's
	// chat template writes <think> (Qwen3, DeepSeek-R1 and their kin; see
	// Model.Thinks), and leaves the text raw otherwise.
	reasoningAuto = "auto"
	reasoningNone = "none"
)

// ValidateReasoningParser checks a --reasoning-parser value.
func ValidateReasoningParser(name string) error {
	if name == "" || name == reasoningAuto || name == reasoningNone {
		return nil
	}
	_, err := parse.ReasoningStyleNamed(name)
	return err
}

// reasoningStyle decides how a Chat's answer is parsed: the request's
// reasoning_parser, else the router's. It returns nil for raw text.
func reasoningStyle(m Rules, requested *string) (*parse.ReasoningStyle, error) {
	name := m.ReasoningParser
	if requested != nil {
		name = *requested
	}
	switch name {
	case reasoningNone:
		return nil, nil
	case "", reasoningAuto:
		if !m.Thinks {
			return nil, nil
		}
		style := parse.Qwen3
		return &style, nil
	}
	style, err := parse.ReasoningStyleNamed(name)
	if err != nil {
		if requested != nil {
			return nil, fault.Invalidf("reasoning_parser", "reasoning_parser: %v (or \"none\", \"auto\")", err)
		}
		return nil, err // validated at start-up
	}
	return &style, nil
}

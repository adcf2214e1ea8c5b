package server

import (
	"github.com/kvgate/kvgate/parse"
)

// The values of --reasoning-parser and ChatRequest.reasoning_parser besides
// the styles' names.
const (
	// reasoningAuto (the default) parses <think> blocks when the model's
	// chat template writes <think> (Qwen3, DeepSeek-R1 and their kin; see
	// thinks), and leaves the text raw otherwise.
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

// reasoningFor decides how a Chat's answer is parsed: the request's
// reasoning_parser, else the router's. It returns nil for raw text; open
// says the rendered prompt left a block open, which the answer then starts
// inside (DeepSeek-R1's template, Qwen3's thinking releases).
func (s *Server) reasoningFor(j *job, requested *string) (func() *parse.Reasoning, error) {
	name := s.reasoningParser
	if requested != nil {
		name = *requested
	}
	tm := j.route.Text
	var style parse.ReasoningStyle
	switch name {
	case reasoningNone:
		return nil, nil
	case "", reasoningAuto:
		if !j.route.Thinks {
			return nil, nil
		}
		style = parse.Qwen3
	default:
		var err error
		if style, err = parse.ReasoningStyleNamed(name); err != nil {
			if requested != nil {
				return nil, invalid("reasoning_parser: %v (or \"none\", \"auto\")", err)
			}
			return nil, err // validated at start-up
		}
	}
	// The block's markers are among the prompt's last tokens when the
	// template opened one: a short tail is enough to tell.
	ids := j.inputIDs[max(0, len(j.inputIDs)-32):]
	tail, _ := tm.Tokenizer().Decode(ids, false)
	open := style.OpensInPrompt(tail)
	return func() *parse.Reasoning { return parse.NewReasoning(style, open) }, nil
}

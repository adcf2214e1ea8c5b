// Package answer is what kvgate does to a Chat beyond routing it: the
// request's JSON fields as chat-template values, the parsers that read the
// engine's output (reasoning, tool calls in a model family's format, the
// JSON a forced tool_choice produces), the constraint that response_format
// or tool_choice puts on the output, and log-probabilities, checked,
// bounded and converted. It knows nothing of gRPC or of the pipeline: its
// inputs are the request's fields, parser names and token→text functions,
// and its errors are faults (package fault) that the front maps to a
// status, so the same rules serve every front.
package answer

import (
	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/parse"
	"github.com/kvgate/kvgate/workers"
)

// Rules is what reading a Chat's answer needs to know of the model and of
// the router's configuration.
type Rules struct {
	// ReasoningParser and ToolCallParser are the router's defaults
	// (--reasoning-parser, --tool-call-parser): a style or format name,
	// "auto", "none", or "" (auto).
	ReasoningParser, ToolCallParser string
	// Thinks: the chat template writes <think> blocks, which "auto"
	// reasoning then parses.
	Thinks bool
	// ToolFormat is the tool-call format the chat template writes, when
	// ToolFormatDetected; "auto" tool-call parsing reads it.
	ToolFormat         parse.ToolFormat
	ToolFormatDetected bool
	// SpecialID is the id of the special token whose text is s, false when
	// s is not one; nil when the model has no tokenizer.
	SpecialID func(s string) (uint32, bool)
}

// Shaper is how one Chat request's answer is read. It is decided once per
// request, before the prompt is rendered and tokenized, so that a request
// whose answer could not be read as asked is refused before that work;
// each attempt then reads its output with an Attempt of its own. A nil
// *Shaper reads the output as raw text (Generate).
type Shaper struct {
	requestID string
	// reasoning splits the reasoning off the content (nil: it does not);
	// open says the prompt left a block open, which the answer then starts
	// inside (DeepSeek-R1's template, Qwen3's thinking releases).
	reasoning *parse.ReasoningStyle
	open      bool
	// tools makes each attempt's tool-call parser (nil: calls are not
	// parsed); keepSpecial are the special tokens that parser reads.
	tools       func() toolParser
	keepSpecial []uint32
	// constraint is what response_format or a forced tool_choice asks of
	// the output, in place of sampling_params'.
	constraint workers.Constraint
}

// New decides how req's answer is read on model m, from its
// reasoning_parser, response_format, tools, tool_choice and
// tool_call_parser, and refuses what cannot be: a parser name that does not
// exist, a malformed response_format or tool_choice, a schema the engines
// would not enforce, two constraints at once. id is the request's id, from
// which the tool calls' ids are made.
func New(req *kvgatev1.ChatRequest, id string, m Rules) (*Shaper, error) {
	s := &Shaper{requestID: id}
	var err error
	if s.reasoning, err = reasoningStyle(m, req.ReasoningParser); err != nil {
		return nil, err
	}
	if err := s.chatTools(req, m); err != nil {
		return nil, err
	}
	return s, nil
}

// SawPrompt tells the shaper the prompt the answer follows: ids, whose
// text text returns. A template may open the reasoning block itself, and
// the answer then starts inside it. Its markers are among the prompt's
// last tokens, so only a short tail is decoded, and only when the
// reasoning is split off.
func (s *Shaper) SawPrompt(ids []uint32, text func(ids []uint32) string) {
	if s == nil || s.reasoning == nil {
		return
	}
	s.open = s.reasoning.OpensInPrompt(text(ids[max(0, len(ids)-32):]))
}

// KeepSpecial are the special tokens the tool-call parser reads: they stay
// in the detokenized text, though special tokens are otherwise skipped.
func (s *Shaper) KeepSpecial() []uint32 {
	if s == nil {
		return nil
	}
	return s.keepSpecial
}

// Constraint is what the answer is held to in place of sampling_params'
// constraint (response_format, a forced tool_choice); NoConstraint when
// nothing replaces it.
func (s *Shaper) Constraint() workers.Constraint {
	if s == nil {
		return workers.Constraint{}
	}
	return s.constraint
}

// ParsesTools reports whether tool calls are read from the answer, for the
// counts of calls parsed and malformed.
func (s *Shaper) ParsesTools() bool { return s != nil && s.tools != nil }

// Start makes the reader of one attempt's output: parsers keep state, and
// a retried attempt starts from the beginning.
func (s *Shaper) Start() *AttemptShaper {
	if s == nil {
		return &AttemptShaper{}
	}
	a := &AttemptShaper{ids: newCallIDs(s.requestID)}
	if s.reasoning != nil {
		a.rp = parse.NewReasoning(*s.reasoning, s.open)
	}
	if s.tools != nil {
		a.tp = s.tools()
		a.id = map[int]string{}
	}
	return a
}

// AttemptShaper shapes one attempt's output text, as it streams, into what the
// client receives: with a reasoning parser, the reasoning apart from the
// content; with a tool-call parser, the calls apart from both. Without
// either, the text passes through as content. It also folds what it
// released, for the completion.
type AttemptShaper struct {
	rp *parse.Reasoning // nil: no reasoning split
	tp toolParser       // nil: tool calls are not parsed
	// ids names the calls; id is the current id of each announced index.
	ids    callIDs
	id     map[int]string
	folded parse.Fold
}

// Shaped is what one text delta released.
type Shaped struct {
	Reasoning, Content string
	Calls              []*kvgatev1.ToolCallDelta
	Malformed          bool
}

// Empty reports whether the delta released nothing to send.
func (s Shaped) Empty() bool {
	return s.Reasoning == "" && s.Content == "" && len(s.Calls) == 0
}

// Push shapes the next text delta.
func (a *AttemptShaper) Push(delta string) Shaped {
	var out Shaped
	a.shape(&out, delta, false)
	return out
}

// Finish shapes the answer's last text and releases what the parsers still
// hold.
func (a *AttemptShaper) Finish(tail string) Shaped {
	var out Shaped
	a.shape(&out, tail, true)
	return out
}

// shape passes text through the reasoning parser, then its content through
// the tool-call parser, flushing both at the end, and adds what they
// release to out.
func (a *AttemptShaper) shape(out *Shaped, text string, end bool) {
	reasoning, content := "", text
	if a.rp != nil {
		reasoning, content = a.rp.Push(text)
		if end {
			r, c := a.rp.Flush()
			reasoning, content = reasoning+r, content+c
		}
	}
	if a.tp == nil {
		a.add(out, parse.Delta{Reasoning: reasoning, Content: content})
		return
	}
	d := a.tp.Push(content)
	d.Reasoning = reasoning + d.Reasoning
	a.add(out, d)
	if end {
		a.add(out, a.tp.Flush())
	}
}

// add folds d into the answer and appends it to out, naming each call as
// it is announced.
func (a *AttemptShaper) add(out *Shaped, d parse.Delta) {
	a.folded.Add(d)
	out.Reasoning += d.Reasoning
	out.Content += d.Content
	out.Malformed = out.Malformed || d.Malformed
	for _, c := range d.Calls {
		td := &kvgatev1.ToolCallDelta{Index: uint32(c.Index), Name: c.Name, Arguments: c.Arguments, Invalid: c.Invalid}
		if c.Name != "" && !c.Invalid {
			a.id[c.Index] = a.ids.id()
			td.Id = a.id[c.Index]
		}
		out.Calls = append(out.Calls, td)
	}
}

// Fill writes the whole answer into the completion; an answer with tool
// calls that stopped as usual finishes with TOOL_CALLS, as OpenAI's API
// says finish_reason "tool_calls".
func (a *AttemptShaper) Fill(c *kvgatev1.GenerateComplete) {
	whole := a.folded.Answer()
	c.Text = whole.Content
	c.ReasoningContent = whole.Reasoning
	c.MalformedToolCall = whole.Malformed
	for _, call := range whole.Calls {
		c.ToolCalls = append(c.ToolCalls, toolCall(a.id[call.Index], call))
	}
	if len(c.ToolCalls) > 0 && c.FinishReason == kvgatev1.FinishReason_FINISH_REASON_STOP {
		c.FinishReason = kvgatev1.FinishReason_FINISH_REASON_TOOL_CALLS
	}
}

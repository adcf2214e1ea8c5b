package server

import (
	"strings"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/parse"
)

// answer shapes one attempt's output text, as it streams, into what the
// client receives: with a reasoning parser, the reasoning apart from the
// content; with a tool-call parser, the calls apart from both. Without
// either, the text passes through as content. It also keeps what it
// released, for the completion.
type answer struct {
	rp *parse.Reasoning // nil: no reasoning split

	reasoning, content strings.Builder
}

// shaped is what one text delta released.
type shaped struct {
	reasoning, content string
	calls              []*kvgatev1.ToolCallDelta
	malformed          bool
}

func (s shaped) empty() bool {
	return s.reasoning == "" && s.content == "" && len(s.calls) == 0
}

// newAnswer makes an attempt's answer shaper from the job's parsers.
func newAnswer(j *job) *answer {
	a := &answer{}
	if j.reasoning != nil {
		a.rp = j.reasoning()
	}
	return a
}

// push shapes the next text delta.
func (a *answer) push(delta string) shaped {
	var out shaped
	if a.rp != nil {
		out.reasoning, out.content = a.rp.Push(delta)
	} else {
		out.content = delta
	}
	a.record(out)
	return out
}

// flush releases what the parsers still hold at the end of the answer.
func (a *answer) flush() shaped {
	var out shaped
	if a.rp != nil {
		out.reasoning, out.content = a.rp.Flush()
	}
	a.record(out)
	return out
}

func (a *answer) record(s shaped) {
	a.reasoning.WriteString(s.reasoning)
	a.content.WriteString(s.content)
}

// fill writes the whole answer into the completion.
func (a *answer) fill(c *kvgatev1.GenerateComplete) {
	c.Text = a.content.String()
	c.ReasoningContent = a.reasoning.String()
}

// merge joins two releases that go out as one chunk.
func (s shaped) merge(t shaped) shaped {
	return shaped{
		reasoning: s.reasoning + t.reasoning,
		content:   s.content + t.content,
		calls:     append(s.calls, t.calls...),
		malformed: s.malformed || t.malformed,
	}
}

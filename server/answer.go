package server

import (
	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/parse"
)

// answer shapes one attempt's output text, as it streams, into what the
// client receives: with a reasoning parser, the reasoning apart from the
// content; with a tool-call parser, the calls apart from both. Without
// either, the text passes through as content. It also folds what it
// released, for the completion.
type answer struct {
	rp *parse.Reasoning // nil: no reasoning split
	tp toolParser       // nil: tool calls are not parsed
	// ids names the calls; id is the current id of each announced index.
	ids    callIDs
	id     map[int]string
	folded parse.Fold
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

// merge joins two releases that go out as one chunk.
func (s shaped) merge(t shaped) shaped {
	return shaped{
		reasoning: s.reasoning + t.reasoning,
		content:   s.content + t.content,
		calls:     append(s.calls, t.calls...),
		malformed: s.malformed || t.malformed,
	}
}

// newAnswer makes an attempt's answer shaper from the job's parsers.
func newAnswer(j *job) *answer {
	a := &answer{ids: newCallIDs(j.id)}
	if j.reasoning != nil {
		a.rp = j.reasoning()
	}
	if j.tools != nil {
		a.tp = j.tools()
		a.id = map[int]string{}
	}
	return a
}

// push shapes the next text delta.
func (a *answer) push(delta string) shaped {
	var reasoning string
	if a.rp != nil {
		reasoning, delta = a.rp.Push(delta)
	}
	return a.release(reasoning, delta, false)
}

// flush releases what the parsers still hold at the end of the answer.
func (a *answer) flush() shaped {
	var reasoning, content string
	if a.rp != nil {
		reasoning, content = a.rp.Flush()
	}
	return a.release(reasoning, content, true)
}

// release passes content through the tool-call parser (flushing it at the
// end) and folds the result.
func (a *answer) release(reasoning, content string, end bool) shaped {
	d := parse.Delta{Reasoning: reasoning, Content: content}
	if a.tp != nil {
		t := a.tp.Push(content)
		if end {
			t = joinDeltas(t, a.tp.Flush())
		}
		d = parse.Delta{Reasoning: reasoning + t.Reasoning, Content: t.Content, Calls: t.Calls, Malformed: t.Malformed}
	}
	a.folded.Add(d)
	out := shaped{reasoning: d.Reasoning, content: d.Content, malformed: d.Malformed}
	for _, c := range d.Calls {
		td := &kvgatev1.ToolCallDelta{Index: uint32(c.Index), Name: c.Name, Arguments: c.Arguments, Invalid: c.Invalid}
		if c.Name != "" && !c.Invalid {
			a.id[c.Index] = a.ids.id()
			td.Id = a.id[c.Index]
		}
		out.calls = append(out.calls, td)
	}
	return out
}

// joinDeltas is a followed by b, as one delta.
func joinDeltas(a, b parse.Delta) parse.Delta {
	return parse.Delta{
		Content:   a.Content + b.Content,
		Reasoning: a.Reasoning + b.Reasoning,
		Calls:     append(a.Calls, b.Calls...),
		Malformed: a.Malformed || b.Malformed,
	}
}

// fill writes the whole answer into the completion; an answer with tool
// calls that stopped as usual finishes with TOOL_CALLS, as OpenAI's API
// says finish_reason "tool_calls".
func (a *answer) fill(c *kvgatev1.GenerateComplete) {
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

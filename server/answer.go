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
	var out shaped
	a.shape(&out, delta, false)
	return out
}

// finish shapes the answer's last text and releases what the parsers still
// hold.
func (a *answer) finish(tail string) shaped {
	var out shaped
	a.shape(&out, tail, true)
	return out
}

// shape passes text through the reasoning parser, then its content through
// the tool-call parser, flushing both at the end, and adds what they
// release to out.
func (a *answer) shape(out *shaped, text string, end bool) {
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
func (a *answer) add(out *shaped, d parse.Delta) {
	a.folded.Add(d)
	out.reasoning += d.Reasoning
	out.content += d.Content
	out.malformed = out.malformed || d.Malformed
	for _, c := range d.Calls {
		td := &kvgatev1.ToolCallDelta{Index: uint32(c.Index), Name: c.Name, Arguments: c.Arguments, Invalid: c.Invalid}
		if c.Name != "" && !c.Invalid {
			a.id[c.Index] = a.ids.id()
			td.Id = a.id[c.Index]
		}
		out.calls = append(out.calls, td)
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

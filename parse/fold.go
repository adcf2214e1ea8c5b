package parse

import "strings"

// Fold applies an answer's deltas in order, as a client does, in time
// linear in the answer: content, reasoning and each call's arguments grow
// in builders, and Answer assembles the result. A retracted call is
// removed; since only the call being parsed can be retracted, it is the
// last one, and the parser gives its index to the next call, so the
// indices of an answer's calls are always 0..n-1, as OpenAI clients
// expect. The zero Fold is empty and ready.
type Fold struct {
	content, reasoning strings.Builder
	// calls are pointers: a strings.Builder must not be copied once used,
	// which growing a slice of values would do.
	calls     []*foldCall
	malformed bool
}

type foldCall struct {
	index int
	name  string
	args  strings.Builder
}

// Add applies d.
func (f *Fold) Add(d Delta) {
	f.content.WriteString(d.Content)
	f.reasoning.WriteString(d.Reasoning)
	f.malformed = f.malformed || d.Malformed
	for _, c := range d.Calls {
		n := len(f.calls)
		last := n > 0 && f.calls[n-1].index == c.Index
		switch {
		case c.Invalid:
			if last {
				f.calls = f.calls[:n-1]
			}
		case last:
			f.calls[n-1].args.WriteString(c.Arguments)
		default:
			fc := &foldCall{index: c.Index, name: c.Name}
			fc.args.WriteString(c.Arguments)
			f.calls = append(f.calls, fc)
		}
	}
}

// Answer is what the deltas applied so far add up to.
func (f *Fold) Answer() Answer {
	a := Answer{Content: f.content.String(), Reasoning: f.reasoning.String(), Malformed: f.malformed}
	for _, c := range f.calls {
		a.Calls = append(a.Calls, Call{Index: c.index, Name: c.name, Arguments: c.args.String()})
	}
	return a
}

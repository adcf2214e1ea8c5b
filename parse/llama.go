package parse

import "strings"

// The llama3 format (Llama 3.1, 3.2 and 3.3 JSON tool calling): the answer
// is a call, a JSON object {"name": …, "parameters": {…}} ("arguments" is
// accepted too), at its start, optionally after <|python_tag|>; several
// calls are separated by ';'. An answer that starts with anything else is
// content, all of it: the format has no marker for a call in mid-answer.
//
// Trimmed: whitespace at the start of an answer that turns out to be a
// call (an answer that is only whitespace gives nothing), whitespace
// around ';', and whitespace after the last call. Text after the calls is
// content. A call that is not JSON ends the calls: it and the rest of the
// answer are content, since nothing marks where a next call would start;
// a call that is JSON but malformed otherwise (an undeclared name) is
// content up to its end, and the calls after it still parse.
const llamaPythonTag = "<|python_tag|>"

const (
	llamaStart   = iota // leading whitespace: call or content?
	llamaContent        // all the rest is content
	llamaJSON           // a call's object
	llamaSkip           // a failed call's object, as content
	llamaAfter          // after a call: ';' or the end
	llamaNext           // after ';': the next call
)

var llamaTags = []string{llamaPythonTag}

func (p *ToolParser) stepLlama3(final bool) bool {
	switch p.st {
	case llamaStart:
		rest := strings.TrimLeft(p.in, " \t\r\n")
		p.hold = append(p.hold, p.in[:len(p.in)-len(rest)]...)
		p.in = rest
		if rest == "" {
			return false
		}
		return p.llamaCallStart(final, llamaContent)
	case llamaContent:
		p.emit(p.in)
		p.in = ""
		return false
	case llamaJSON, llamaSkip:
		switch p.feedJSON() {
		case jsonMore:
			return false
		case jsonDone:
			p.st = llamaAfter
			if p.call.active {
				p.complete()
			}
		case jsonFailed:
			p.st = llamaSkip
		case jsonSyntax:
			p.st = llamaContent
		}
	case llamaAfter:
		if !p.dropSpace() {
			return false
		}
		if p.in[0] == ';' {
			p.consume(1)
			p.st = llamaNext
			return true
		}
		p.st = llamaContent
	case llamaNext:
		if !p.dropSpace() {
			return false
		}
		return p.llamaCallStart(final, llamaContent)
	}
	return true
}

// llamaCallStart starts a call if the input does (with '{' or the python
// tag); otherwise the answer goes on as state else. The held leading
// whitespace belongs to what follows: the call's raw text, or content.
func (p *ToolParser) llamaCallStart(final bool, otherwise int) bool {
	which, wait := p.match(llamaTags, final)
	switch {
	case wait:
		return false
	case which == 0 || p.in[0] == '{':
		n := 0
		if which == 0 {
			n = len(llamaPythonTag)
		}
		p.begin(p.hold, n, false)
		p.hold = p.hold[:0]
		p.st = llamaJSON
	default:
		p.emit(string(p.hold))
		p.hold = p.hold[:0]
		p.st = otherwise
	}
	return true
}

// finishLlama3: an answer of whitespace alone is no content.
func (p *ToolParser) finishLlama3() {
	if p.st == llamaStart {
		p.hold = p.hold[:0]
	}
}

package parse

import "strings"

// The mistral format, in its two forms. Older tokenizers (v3) write one
// JSON array of calls after the marker:
//
//	[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {…}]
//
// newer ones (v11 and later) write each call's name, then its arguments,
// repeating the marker for each call:
//
//	[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]…
//
// Content before [TOOL_CALLS] is content. Trimmed: whitespace between
// [TOOL_CALLS] and what follows it, and after a call or the array. In the
// array form the raw text of a malformed call is its element; an array
// that stops being JSON ends the calls there, the rest being content
// (with Malformed set) until the next [TOOL_CALLS], and if that happens
// before its first element, "[TOOL_CALLS][" is content too. In the named form a
// malformed call is its whole text from [TOOL_CALLS], and the content
// after it runs to the next [TOOL_CALLS].
const (
	mistralCalls = "[TOOL_CALLS]"
	mistralArgs  = "[ARGS]"
)

const (
	mistralContent = iota // content, until [TOOL_CALLS]
	mistralStart          // after [TOOL_CALLS]: an array or a name
	mistralName           // a named call's name, until [ARGS]
	mistralJSON           // a named call's arguments
	mistralAfter          // after a call: whitespace is dropped
	mistralArray          // inside the array of calls
)

var (
	mistralCallsMarkers = []string{mistralCalls}
	mistralArgsMarkers  = []string{mistralArgs}
)

func (p *ToolParser) stepMistral(final bool) bool {
	switch p.st {
	case mistralContent:
		if p.emitUntil(mistralCallsMarkers, final, &p.content) < 0 {
			return false
		}
		p.hold = append(p.hold[:0], mistralCalls...)
		p.consume(len(mistralCalls))
		p.st = mistralStart
	case mistralStart:
		rest := strings.TrimLeft(p.in, " \t\r\n")
		p.hold = append(p.hold, p.in[:len(p.in)-len(rest)]...)
		p.in = rest
		switch {
		case rest == "":
			return false
		case rest[0] == '[':
			// The opening text is kept until the first element: an array
			// that breaks before it is content, markers and all.
			p.hold, p.base, p.elem = append(p.hold, '['), 1, false
			p.scan.reset()
			p.scan.step('[')
			p.consume(1)
			p.st = mistralArray
		case isNameByte(rest[0]):
			p.begin(p.hold, 0, true)
			p.hold = p.hold[:0]
			p.st = mistralName
		default:
			p.emit(string(p.hold))
			p.hold = p.hold[:0]
			p.out.Malformed = true
			p.st = mistralContent
		}
	case mistralName:
		ended, ok := p.readName()
		if ok && !ended {
			return false
		}
		which, wait := p.match(mistralArgsMarkers, final)
		if ok && wait {
			return false
		}
		if !ok || which < 0 {
			p.fail()
			p.st = mistralContent
			return true
		}
		p.eat(len(mistralArgs))
		p.st = mistralJSON
		if !p.announce() {
			p.st = mistralContent
		}
	case mistralJSON:
		switch p.feedJSON() {
		case jsonMore:
			return false
		case jsonDone:
			if p.call.active {
				p.complete()
				p.st = mistralAfter
				return true
			}
		}
		p.st = mistralContent
	case mistralAfter:
		if !p.dropSpace() {
			return false
		}
		p.st = mistralContent
	case mistralArray:
		return p.stepMistralArray()
	}
	return true
}

// stepMistralArray moves through the array of calls: an element that is
// an object is a call; separators and the brackets are dropped.
func (p *ToolParser) stepMistralArray() bool {
	if p.elem {
		switch p.feedJSON() {
		case jsonMore:
			return false
		case jsonDone:
			if p.call.active {
				p.complete()
			}
			p.elem = false
		case jsonSyntax:
			p.leaveArray(mistralContent)
		}
		return true
	}
	if p.in == "" {
		return false
	}
	b := p.in[0]
	switch {
	case b == '{' && p.scan.expectsValue():
		p.hold = p.hold[:0]
		p.begin(nil, 0, false)
		p.elem = true
	case isJSONSpace(b) || b == ',' || b == ']':
		if !p.scan.step(b) {
			p.out.Malformed = true
			p.leaveArray(mistralContent)
			return true
		}
		if len(p.hold) > 0 {
			p.hold = append(p.hold, b)
		}
		p.consume(1)
		if p.scan.done() {
			p.hold = p.hold[:0]
			p.leaveArray(mistralAfter)
		}
	default:
		// Not an object where a call should be: the calls end here.
		p.out.Malformed = true
		p.leaveArray(mistralContent)
	}
	return true
}

// leaveArray ends the array of calls; an array left before its first
// element releases its opening text as content.
func (p *ToolParser) leaveArray(st int) {
	if len(p.hold) > 0 {
		p.emit(string(p.hold))
		p.hold = p.hold[:0]
		p.out.Malformed = true
	}
	p.base, p.elem, p.st = 0, false, st
}

// finishMistral: [TOOL_CALLS] (and the array's '[') with nothing after it
// is a call cut short.
func (p *ToolParser) finishMistral() {
	if (p.st == mistralStart || p.st == mistralArray) && len(p.hold) > 0 {
		p.out.Malformed = true
	}
}

package parse

import "strings"

// The harmony format of gpt-oss (OpenAI's "harmony response format",
// github.com/openai/harmony and openai/openai-cookbook
// articles/openai-harmony.md). An answer is a series of messages, each a
// header, <|message|>, a body and an end:
//
//	<|channel|>analysis<|message|>User wants weather.<|end|>
//	<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>
//
// or …<|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>.
// The first message's <|start|>assistant is in the prompt. The recipient
// to=functions.NAME may also come before <|channel|> (in the role part of
// the header).
//
// Routing: a message with a functions.NAME recipient is a tool call whose
// arguments are its body (a JSON object); one with another recipient
// (a built-in tool such as browser.search) is not a function call and is
// content, marked Malformed. Otherwise the analysis channel is reasoning;
// final, commentary (a preamble) and any other channel are content.
// Trimmed: whitespace around a call's JSON; bodies are released as
// written. A header is at most maxHeaderLen bytes; text that is not a
// header is content.
const (
	hmStart     = "<|start|>"
	hmChannel   = "<|channel|>"
	hmMessage   = "<|message|>"
	hmConstrain = "<|constrain|>"
	hmEnd       = "<|end|>"
	hmCall      = "<|call|>"
	hmReturn    = "<|return|>"
)

// maxHeaderLen bounds a message header, which is held until it is whole.
const maxHeaderLen = 256

const functionsPrefix = "functions."

const (
	hmHeader  = iota // a header, until <|message|>
	hmBody           // a message's body: reasoning or content
	hmJSON           // a call's arguments
	hmCallEnd        // after the arguments: <|call|>
	hmBetween        // between messages: content, until <|start|> or <|channel|>
	hmResync         // a failed call's text, until its end
)

var (
	hmNotHeader  = []string{hmEnd, hmCall, hmReturn, hmStart}
	hmBodyEnds   = []string{hmEnd, hmReturn, hmCall, hmStart}
	hmCallEnds   = []string{hmCall, hmEnd, hmReturn}
	hmNextHeader = []string{hmStart, hmChannel}
)

func (p *ToolParser) stepHarmony(final bool) bool {
	switch p.st {
	case hmHeader:
		if len(p.hold) == 0 && strings.HasPrefix(p.in, hmStart) {
			p.hold = append(p.hold[:0], hmStart...)
			p.consume(len(hmStart))
		}
		window := p.in[:min(len(p.in), maxHeaderLen+len(hmMessage))]
		i := strings.Index(window, hmMessage)
		if i < 0 {
			i = len(window)
		}
		if _, j := firstMarker(window[:i], hmNotHeader); j < 0 && i < len(window) {
			return p.harmonyHeader(p.in[:i])
		} else if j < 0 && !final && len(window) < maxHeaderLen+len(hmMessage) {
			return false
		}
		// Not a header: its markers are text, and what follows is
		// content until the next message.
		p.emit(string(p.hold))
		p.hold = p.hold[:0]
		if strings.HasPrefix(p.in, hmChannel) {
			p.emit(hmChannel)
			p.consume(len(hmChannel))
		}
		p.st = hmBetween
	case hmBody:
		to := &p.content
		if p.thinking {
			to = &p.reasoning
		}
		which := p.emitUntil(hmBodyEnds, final, to)
		if which < 0 {
			return false
		}
		if end := hmBodyEnds[which]; end != hmStart {
			p.consume(len(end)) // the message's end marker; <|start|> begins the next
		}
		p.st = hmBetween
	case hmJSON:
		switch p.feedJSON() {
		case jsonMore:
			return false
		case jsonDone:
			if p.call.active {
				p.st = hmCallEnd
				return true
			}
		}
		p.st = hmResync
	case hmCallEnd:
		if !p.skipSpace() {
			return false
		}
		which, wait := p.match(hmCallEnds, final)
		switch {
		case wait:
			return false
		case which < 0:
			p.fail()
			p.st = hmResync
			return true
		}
		p.eat(len(hmCallEnds[which]))
		p.complete()
		p.st = hmBetween
	case hmBetween:
		switch p.emitUntil(hmNextHeader, final, &p.content) {
		case -1:
			return false
		case 0:
			p.hold = append(p.hold[:0], hmStart...)
			p.consume(len(hmStart))
		}
		p.st = hmHeader
	case hmResync:
		which := p.emitUntil(hmBodyEnds, final, &p.content)
		if which < 0 {
			return false
		}
		if end := hmBodyEnds[which]; end != hmStart {
			p.emit(end)
			p.consume(len(end))
		}
		p.st = hmBetween
	}
	return true
}

// harmonyHeader routes the message whose header (after <|start|>, before
// <|message|>) is h, the input's first len(h) bytes.
func (p *ToolParser) harmonyHeader(h string) bool {
	fields := strings.Fields(strings.ReplaceAll(strings.ReplaceAll(h, hmChannel, " "+hmChannel), hmConstrain, " "))
	channel, recipient := "", ""
	for _, f := range fields {
		switch {
		case strings.HasPrefix(f, hmChannel):
			channel = f[len(hmChannel):]
		case strings.HasPrefix(f, "to="):
			recipient = f[len("to="):]
		}
	}
	n := len(h) + len(hmMessage)
	if recipient == "" {
		p.consume(n)
		p.hold = p.hold[:0]
		p.thinking = channel == "analysis"
		p.st = hmBody
		return true
	}
	p.begin(p.hold, n, true)
	p.hold = p.hold[:0]
	p.st = hmResync
	if name, ok := strings.CutPrefix(recipient, functionsPrefix); ok {
		p.call.name = name
		if p.announce() {
			p.st = hmJSON
		}
		return true
	}
	p.fail()
	return true
}

package parse

// The hermes format (NousResearch Hermes 2 Pro / 3, and Qwen2.5 and Qwen3,
// whose chat templates write the same markers): each call is a JSON object
// between markers, several calls in a row, text around them is content:
//
//	Let me look.
//	<tool_call>
//	{"name": "get_weather", "arguments": {"city": "Paris"}}
//	</tool_call>
//
// Trimmed: whitespace between <tool_call> and the object, between the
// object and </tool_call>, and after the </tool_call> of a call (the
// newline between two calls, or before the content that follows them). A
// malformed call's text is content as written, whitespace included. Content before a call
// is released as written, its whitespace included.
const (
	hermesOpen  = "<tool_call>"
	hermesClose = "</tool_call>"
)

const (
	hermesContent = iota // content, until <tool_call>
	hermesJSON           // the call's object
	hermesClosing        // after the object: </tool_call>
	hermesAfter          // after a call: whitespace is dropped
	hermesResync         // a failed call's text, until </tool_call> or <tool_call>
)

var (
	hermesOpens   = []string{hermesOpen}
	hermesCloses  = []string{hermesClose}
	hermesResyncs = []string{hermesClose, hermesOpen}
)

func (p *ToolParser) stepHermes(final bool) bool {
	switch p.st {
	case hermesContent:
		if p.emitUntil(hermesOpens, final, &p.content) < 0 {
			return false
		}
		p.begin(nil, len(hermesOpen), false)
		p.st = hermesJSON
	case hermesJSON:
		switch p.feedJSON() {
		case jsonMore:
			return false
		case jsonDone:
			if p.call.active {
				p.st = hermesClosing
				return true
			}
		}
		p.st = hermesResync
	case hermesClosing:
		if !p.skipSpace() {
			return false
		}
		which, wait := p.match(hermesCloses, final)
		if wait {
			return false
		}
		if which < 0 {
			p.fail()
			p.st = hermesResync
			return true
		}
		p.eat(len(hermesClose))
		p.complete()
		p.st = hermesAfter
	case hermesAfter:
		if !p.dropSpace() {
			return false
		}
		p.st = hermesContent
	case hermesResync:
		switch p.emitUntil(hermesResyncs, final, &p.content) {
		case -1:
			return false
		case 0:
			// A failed call's text is content as the model wrote it, the
			// whitespace after it included.
			p.emit(hermesClose)
			p.consume(len(hermesClose))
			p.st = hermesContent
		case 1:
			p.st = hermesContent
		}
	}
	return true
}

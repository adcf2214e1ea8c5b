package parse

// The deepseek_v3 format. DeepSeek-V3 and V3-0324 write
//
//	<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
//	```json
//	{"city": "Paris"}
//	```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//
// and V3.1 drops the type and the fence:
//
//	<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//
// The markers are special tokens spelled with U+FF5C FULLWIDTH VERTICAL
// LINE and U+2581 LOWER ONE EIGHTH BLOCK, as in the tokenizer_config.json
// chat templates of deepseek-ai/DeepSeek-V3-0324 and DeepSeek-V3.1 and in
// vLLM's deepseek_v3 and deepseek_v31 tool parsers
// (vllm/entrypoints/openai/tool_parsers/deepseekv3_tool_parser.py).
//
// Both forms are read by one parser: after <｜tool▁sep｜>, a call whose
// type was "function" and which goes on with a name is the V3 form. A call
// may also start without <｜tool▁calls▁begin｜>. Content before the calls
// is content. Trimmed: whitespace around the name, the fence and the JSON,
// between calls, and after <｜tool▁calls▁end｜>. A malformed call's raw
// text runs from its <｜tool▁call▁begin｜> to its <｜tool▁call▁end｜>; the
// calls' wrapper markers are not part of any call.
const (
	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"
)

const (
	dsContent  = iota // content, until a calls or call begin
	dsBetween         // before a call or the calls' end
	dsType            // after <｜tool▁call▁begin｜>: a type (V3) or name (V3.1)
	dsTypeSep         // <｜tool▁sep｜>
	dsSepped          // after <｜tool▁sep｜>: which form
	dsName            // V3: the name after the type
	dsFence           // V3: ```json
	dsJSON            // the arguments
	dsFenceEnd        // V3: ```
	dsEnd             // <｜tool▁call▁end｜>
	dsAfter           // after the calls: whitespace is dropped
	dsResync          // a failed call's text, until its end
)

var (
	dsStarts    = []string{dsCallsBegin, dsCallBegin}
	dsNexts     = []string{dsCallBegin, dsCallsEnd}
	dsSeps      = []string{dsSep}
	dsFences    = []string{"```json", "```"}
	dsFenceEnds = []string{"```"}
	dsEnds      = []string{dsCallEnd}
	dsResyncs   = []string{dsCallEnd, dsCallBegin, dsCallsEnd}
)

func (p *ToolParser) stepDeepSeek(final bool) bool {
	switch p.st {
	case dsContent:
		switch p.emitUntil(dsStarts, final, &p.content) {
		case -1:
			return false
		case 0:
			p.consume(len(dsCallsBegin))
			p.st = dsBetween
		case 1:
			p.st = dsBetween
		}
	case dsBetween:
		if !p.dropSpace() {
			return false
		}
		which, wait := p.match(dsNexts, final)
		switch {
		case wait:
			return false
		case which == 0:
			p.begin(nil, len(dsCallBegin), true)
			p.st = dsType
		case which == 1:
			p.consume(len(dsCallsEnd))
			p.st = dsAfter
		default:
			p.st = dsContent
		}
	case dsType:
		if !p.skipSpace() {
			return false
		}
		ended, ok := p.readName()
		if ok && !ended {
			return false
		}
		p.st = dsTypeSep
		if !ok {
			p.fail()
			p.st = dsResync
		}
	case dsTypeSep:
		if !p.skipSpace() {
			return false
		}
		which, wait := p.match(dsSeps, final)
		if wait {
			return false
		}
		if which < 0 {
			p.fail()
			p.st = dsResync
			return true
		}
		p.eat(len(dsSep))
		p.st = dsSepped
	case dsSepped:
		// V3 writes a type, "function", then the name; in V3.1 what came
		// before the separator was the name. Only a V3.1 function called
		// "function" waits for the next byte to tell.
		if p.call.name == "function" && p.in == "" {
			return false
		}
		p.fenced = p.call.name == "function" && isNameByte(p.in[0])
		if p.fenced {
			p.call.name = ""
			p.st = dsName
			return true
		}
		p.st = dsJSON
		if !p.announce() {
			p.st = dsResync
		}
	case dsName:
		ended, ok := p.readName()
		if ok && !ended {
			return false
		}
		p.st = dsFence
		if !ok || !p.announce() {
			p.fail()
			p.st = dsResync
		}
	case dsFence, dsFenceEnd, dsEnd:
		if !p.skipSpace() {
			return false
		}
		lits, next := dsFences, dsJSON
		if p.st == dsFenceEnd {
			lits, next = dsFenceEnds, dsEnd
		} else if p.st == dsEnd {
			lits = dsEnds
		}
		which, wait := p.match(lits, final)
		switch {
		case wait:
			return false
		case which < 0:
			p.fail()
			p.st = dsResync
			return true
		}
		p.eat(len(lits[which]))
		if p.st == dsEnd {
			p.complete()
			next = dsBetween
		}
		p.st = next
	case dsJSON:
		switch p.feedJSON() {
		case jsonMore:
			return false
		case jsonDone:
			if p.call.active {
				p.st = dsEnd
				if p.fenced {
					p.st = dsFenceEnd
				}
				return true
			}
		}
		p.st = dsResync
	case dsAfter:
		if !p.dropSpace() {
			return false
		}
		p.st = dsContent
	case dsResync:
		switch p.emitUntil(dsResyncs, final, &p.content) {
		case -1:
			return false
		case 0:
			p.emit(dsCallEnd)
			p.consume(len(dsCallEnd))
		}
		p.st = dsBetween
	}
	return true
}

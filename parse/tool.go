package parse

import (
	"fmt"
	"strings"
)

// ToolFormat is one model family's tool-call format.
type ToolFormat struct {
	// Name selects the format (ToolFormatNamed).
	Name string
	kind toolKind
	// markers are the special-token strings of the format; detect is the
	// one a chat template writes when it offers tools.
	markers []string
	detect  string
	// unlike are strings of other formats that share detect: a template
	// that writes one of them is not this format's (Qwen3-Coder's and
	// Qwen3.5's <tool_call><function=…>, GLM's <tool_call>name<arg_key>,
	// whose calls are not hermes JSON).
	unlike []string
}

type toolKind uint8

const (
	kindHermes toolKind = iota
	kindLlama3
	kindMistral
	kindDeepSeekV3
	kindHarmony
)

// ToolFormats are the formats kvgate parses.
func ToolFormats() []ToolFormat {
	return []ToolFormat{
		{Name: "hermes", kind: kindHermes, markers: []string{hermesOpen, hermesClose}, detect: hermesOpen, unlike: []string{"<function=", "<arg_key>"}},
		{Name: "llama3", kind: kindLlama3, markers: []string{llamaPythonTag}, detect: llamaPythonTag},
		{Name: "mistral", kind: kindMistral, markers: []string{mistralCalls, mistralArgs}, detect: mistralCalls},
		{Name: "deepseek_v3", kind: kindDeepSeekV3, markers: []string{dsCallsBegin, dsCallsEnd, dsCallBegin, dsCallEnd, dsSep}, detect: dsCallsBegin},
		{Name: "harmony", kind: kindHarmony, markers: []string{hmStart, hmChannel, hmMessage, hmConstrain, hmEnd, hmCall, hmReturn}, detect: hmChannel},
	}
}

// ToolFormatNamed returns the format called name.
func ToolFormatNamed(name string) (ToolFormat, error) {
	var names []string
	for _, f := range ToolFormats() {
		if f.Name == name {
			return f, nil
		}
		names = append(names, f.Name)
	}
	return ToolFormat{}, fmt.Errorf("unknown tool-call parser %q (available: %s)", name, strings.Join(names, ", "))
}

// Markers are the special-token strings the parser needs to see in the
// decoded text; the caller keeps these tokens when it otherwise skips
// special tokens.
func (f ToolFormat) Markers() []string { return append([]string(nil), f.markers...) }

// HandlesReasoning reports whether the format carries reasoning itself
// (harmony's analysis channel), so the caller does not also run a <think>
// parser over the same text.
func (f ToolFormat) HandlesReasoning() bool { return f.kind == kindHarmony }

// DetectToolFormat returns the format whose markers a chat template's
// source writes, false when none: a template that renders tool calls
// spells out the markers its model was trained to write.
func DetectToolFormat(template string) (ToolFormat, bool) {
	// The rarest markers first: harmony's and deepseek's cannot be
	// anything else, and hermes goes before llama3 so that a Hermes
	// fine-tune of Llama 3.1, whose template may still mention
	// <|python_tag|>, is read by the format it writes its calls in.
	order := []toolKind{kindHarmony, kindDeepSeekV3, kindMistral, kindHermes, kindLlama3}
	formats := ToolFormats()
	for _, k := range order {
		for _, f := range formats {
			if f.kind == k && strings.Contains(template, f.detect) && !containsAny(template, f.unlike) {
				return f, true
			}
		}
	}
	return ToolFormat{}, false
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// ToolOptions configure a ToolParser.
type ToolOptions struct {
	// Tools are the declared function names; a call naming another
	// function is malformed. Empty: any name is accepted.
	Tools []string
}

// Delta is what one Push or Flush releases.
type Delta struct {
	Content string
	// Reasoning is set by formats that carry it (harmony) only.
	Reasoning string
	// Calls are the call fragments released, in order.
	Calls []CallDelta
	// Malformed is set when Content includes the raw text of a tool call
	// that did not parse.
	Malformed bool
}

// CallDelta is the next piece of one call.
type CallDelta struct {
	// Index is the call's position among the answer's calls, from 0.
	Index int
	// Name is set on the call's first delta only.
	Name string
	// Arguments is the next fragment of the arguments' JSON text.
	Arguments string
	// Invalid retracts call Index: it was announced but then failed to
	// parse. Its raw text is in the Content of the same Delta, with
	// Malformed set, and the next call takes its Index.
	Invalid bool
}

// Answer is the fold of an answer's deltas (see Fold): what a client that
// applied every Delta in order holds at the end.
type Answer struct {
	Content, Reasoning string
	Calls              []Call
	Malformed          bool
}

// Call is one complete tool call.
type Call struct {
	Index           int
	Name, Arguments string
}

// maxNameLen bounds a function's name: a longer one is malformed, so the
// parser never holds more than this of it.
const maxNameLen = 128

// isNameByte reports whether c may be part of a function name. OpenAI
// names are [A-Za-z0-9_-]; '.' and ':' are namespaced names some
// templates write.
func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) || c == '_' || c == '-' || c == '.' || c == ':'
}

// ToolParser splits one answer into content and tool calls as it streams.
//
// The rules, the same for any split of the text into deltas (tested over
// every two-chunk split, byte by byte and random chunkings):
//   - content is released as it arrives, except for what may be the start
//     of a marker, and whitespace the format trims;
//   - a call is announced (Index and Name) as soon as its name is known
//     and declared, and its arguments' JSON text is released byte by byte
//     as an incremental scanner accepts it; a call without arguments gets
//     "{}";
//   - a call that turns out malformed (invalid JSON, a marker before its
//     JSON ends, a missing or undeclared name, arguments that are not an
//     object, the answer ending before its JSON does) is never dropped:
//     its raw text, markers included, becomes content with Malformed set,
//     and a call already announced is retracted (Invalid) in the same
//     Delta. The text after it keeps being parsed;
//   - an answer that ends once a call's JSON is complete, with only the
//     closing marker missing, keeps the call: the engine's stop strings
//     may have eaten the marker.
//
// Memory: what is received and not released is shorter than the longest
// marker (a harmony header is held whole, up to maxHeaderLen bytes; a
// name, up to maxNameLen, or 4×maxNameLen bytes of a JSON string that
// escapes it, and a wrapper key up to maxKeyLen+1; leading whitespace
// being trimmed is kept aside);
// JSON text is released as scanned, and the scanner keeps one byte per
// open container, at most maxJSONDepth. Two things grow with one call,
// never with the answer: the current call's raw text, kept so that a
// retraction can put it into content and dropped when the call completes,
// and arguments written before the name in a {"name", "arguments"}
// object, which cannot be released until the name is validated.
//
// A ToolParser is not safe for concurrent use.
type ToolParser struct {
	f     ToolFormat
	tools map[string]bool
	// in is text received and not consumed; partial is the start of a
	// UTF-8 sequence the next delta completes.
	in, partial string
	st          int
	out         Delta
	content     strings.Builder
	reasoning   strings.Builder
	// calls is the number of completed calls: the next call's Index.
	calls int
	call  callState
	scan  jsonScanner
	// base is the scanner depth a call's JSON starts at (1 inside
	// mistral's array of calls).
	base int
	// hold is format text kept aside: llama3's leading whitespace,
	// mistral's [TOOL_CALLS] before its form is known, harmony's
	// <|start|>.
	hold []byte
	// elem: inside an element of mistral's array of calls.
	elem bool
	// fenced: the deepseek call is in the V3 form, its JSON in a fence.
	fenced bool
	// thinking: the harmony message being read is reasoning.
	thinking bool
}

// NewToolParser returns a parser for one answer in format f.
func NewToolParser(f ToolFormat, opts ToolOptions) *ToolParser {
	p := &ToolParser{f: f}
	if len(opts.Tools) > 0 {
		p.tools = make(map[string]bool, len(opts.Tools))
		for _, t := range opts.Tools {
			p.tools[t] = true
		}
	}
	p.scan.reset()
	return p
}

// Push takes the next delta and releases what can be released now.
func (p *ToolParser) Push(delta string) Delta {
	s := p.partial + delta
	n := incompleteRune(s)
	p.in, p.partial = p.in+s[:len(s)-n], s[len(s)-n:]
	for p.step(false) {
	}
	return p.release()
}

// Flush ends the answer and releases everything held back.
func (p *ToolParser) Flush() Delta {
	p.in += p.partial
	p.partial = ""
	for p.step(true) {
	}
	if p.call.active {
		if p.call.jsonDone {
			p.complete()
		} else {
			p.fail()
		}
	}
	p.finish()
	p.emit(string(p.hold) + p.in)
	p.hold, p.in = p.hold[:0], ""
	return p.release()
}

// step makes one move of the format's state machine; false when it needs
// more text (or, when final, has nothing left to do).
func (p *ToolParser) step(final bool) bool {
	switch p.f.kind {
	case kindHermes:
		return p.stepHermes(final)
	case kindLlama3:
		return p.stepLlama3(final)
	case kindMistral:
		return p.stepMistral(final)
	case kindDeepSeekV3:
		return p.stepDeepSeek(final)
	case kindHarmony:
		return p.stepHarmony(final)
	}
	return false
}

// finish settles format state at the end of the answer.
func (p *ToolParser) finish() {
	switch p.f.kind {
	case kindLlama3:
		p.finishLlama3()
	case kindMistral:
		p.finishMistral()
	}
}

func (p *ToolParser) release() Delta {
	d := p.out
	d.Content, d.Reasoning = p.content.String(), p.reasoning.String()
	p.out = Delta{}
	p.content.Reset()
	p.reasoning.Reset()
	return d
}

// emit releases s as content.
func (p *ToolParser) emit(s string) { p.content.WriteString(s) }

// consume drops the first n bytes of the input, which were used.
func (p *ToolParser) consume(n int) { p.in = p.in[n:] }

// emitUntil releases content up to the first of markers; it returns the
// marker's index, or -1 when none is found (then all but a possible
// marker prefix is released). The marker itself stays in the input.
func (p *ToolParser) emitUntil(markers []string, final bool, to *strings.Builder) int {
	pos, which := firstMarker(p.in, markers)
	if which < 0 {
		pos = len(p.in)
		if !final {
			keep := 0
			for _, m := range markers {
				keep = max(keep, markerPrefixLen(p.in, m))
			}
			pos -= keep
		}
	}
	to.WriteString(p.in[:pos])
	p.consume(pos)
	return which
}

// firstMarker finds the earliest of markers in s.
func firstMarker(s string, markers []string) (pos, which int) {
	// Searching for each marker in turn would scan the whole input for a
	// marker that does not occur, once per call: quadratic in an answer
	// of many calls that arrives in one delta. Instead, stop at each byte
	// a marker starts with and try the markers there, so the cost is the
	// bytes up to the first marker found.
	var starts [256]bool
	for _, m := range markers {
		if m != "" {
			starts[m[0]] = true
		}
	}
	for i := 0; i < len(s); i++ {
		if !starts[s[i]] {
			continue
		}
		for k, m := range markers {
			if m != "" && strings.HasPrefix(s[i:], m) {
				return i, k
			}
		}
	}
	return len(s), -1
}

// skipSpace consumes leading whitespace, as part of the current call's
// text, and reports whether a non-space byte follows.
func (p *ToolParser) skipSpace() bool {
	n := len(p.in) - len(strings.TrimLeft(p.in, " \t\r\n"))
	p.eat(n)
	return p.in != ""
}

// dropSpace drops leading whitespace and reports whether a non-space
// byte follows.
func (p *ToolParser) dropSpace() bool {
	p.in = strings.TrimLeft(p.in, " \t\r\n")
	return p.in != ""
}

// match reports whether the input starts with one of lits (the index of
// the longest), or whether it is still too short to tell (wait): a longer
// literal may yet match. When final nothing more comes, so a prefix is a
// mismatch.
func (p *ToolParser) match(lits []string, final bool) (which int, wait bool) {
	which = -1
	for i, l := range lits {
		switch {
		case strings.HasPrefix(p.in, l):
			if which < 0 || len(l) > len(lits[which]) {
				which = i
			}
		case !final && strings.HasPrefix(l, p.in):
			wait = true
		}
	}
	if wait {
		return -1, true
	}
	return which, false
}

// readName consumes name bytes into the current call's name; it reports
// whether the name ended (a non-name byte follows) and whether it is
// still acceptable (not too long).
func (p *ToolParser) readName() (ended, ok bool) {
	n := 0
	for n < len(p.in) && isNameByte(p.in[n]) {
		n++
	}
	p.call.name += p.in[:n]
	p.eat(n)
	if len(p.call.name) > maxNameLen {
		return true, false
	}
	return p.in != "", true
}

// callState is the call being parsed.
type callState struct {
	// active: a call is being parsed and has not failed.
	active bool
	// announced: its Index and Name were released.
	announced bool
	// raw is its text so far, markers included.
	raw  strings.Builder
	name string
	// jsonDone: its arguments (or wrapper object) are complete.
	jsonDone bool
	// Wrapper-object tracking (hermes, llama3, mistral's array): which
	// key's value is being scanned, the key or name text while scanned,
	// arguments seen before the name, and which keys were seen.
	field            wrapField
	key              []byte
	nameText         []byte
	pendingArgs      []byte
	haveName, haveAr bool
	// bare: the JSON is the arguments themselves (deepseek, mistral's
	// [ARGS], harmony), not a {"name", "arguments"} wrapper.
	bare bool
	// started: the JSON value's first byte was seen.
	started bool
}

// begin starts a call whose raw text starts with held (format text kept
// aside, such as llama3's leading whitespace) and the first n bytes of the
// input (its opening marker), and whose JSON is bare or wrapped. held is
// written to the raw text rather than put back before the input, which
// would copy the rest of the input once per call.
func (p *ToolParser) begin(held []byte, n int, bare bool) {
	p.call.active, p.call.announced, p.call.jsonDone = true, false, false
	p.call.raw.Reset()
	p.call.raw.Write(held)
	p.call.name, p.call.field, p.call.bare, p.call.started = "", fieldNone, bare, false
	p.call.key, p.call.nameText, p.call.pendingArgs = p.call.key[:0], p.call.nameText[:0], p.call.pendingArgs[:0]
	p.call.haveName, p.call.haveAr = false, false
	if p.base == 0 {
		p.scan.reset()
	}
	p.eat(n)
}

// eat consumes n bytes of input as the current call's text: kept as raw
// while the call is good, released as content once it has failed.
func (p *ToolParser) eat(n int) {
	if p.call.active {
		p.call.raw.WriteString(p.in[:n])
	} else {
		p.emit(p.in[:n])
	}
	p.consume(n)
}

// announce releases the call's Index and Name, if the name is valid and
// declared; otherwise the call fails.
func (p *ToolParser) announce() bool {
	name := p.call.name
	ok := name != "" && len(name) <= maxNameLen
	for i := 0; ok && i < len(name); i++ {
		ok = isNameByte(name[i])
	}
	if ok && p.tools != nil {
		ok = p.tools[name]
	}
	if !ok {
		p.fail()
		return false
	}
	p.out.Calls = append(p.out.Calls, CallDelta{Index: p.calls, Name: name})
	p.call.announced = true
	if len(p.call.pendingArgs) > 0 {
		p.args(string(p.call.pendingArgs))
		p.call.pendingArgs = p.call.pendingArgs[:0]
	}
	return true
}

// args releases the next fragment of the current call's arguments.
func (p *ToolParser) args(s string) {
	if s == "" {
		return
	}
	if n := len(p.out.Calls); n > 0 && p.out.Calls[n-1].Index == p.calls && !p.out.Calls[n-1].Invalid {
		p.out.Calls[n-1].Arguments += s
		return
	}
	p.out.Calls = append(p.out.Calls, CallDelta{Index: p.calls, Arguments: s})
}

// complete ends the current call: one without a name fails, one without
// arguments gets {}.
func (p *ToolParser) complete() {
	if !p.call.announced {
		if p.call.bare || !p.call.haveName {
			p.fail()
			return
		}
		if !p.announce() {
			return
		}
	}
	if !p.call.bare && !p.call.haveAr {
		p.args("{}")
	}
	p.call.active = false
	p.call.raw.Reset()
	p.calls++
}

// fail turns the current call into content: its raw text is released
// with Malformed set, and an announced call is retracted.
func (p *ToolParser) fail() {
	if !p.call.active {
		return
	}
	p.emit(p.call.raw.String())
	p.call.raw.Reset()
	p.out.Malformed = true
	if p.call.announced {
		p.out.Calls = append(p.out.Calls, CallDelta{Index: p.calls, Invalid: true})
	}
	p.call.active = false
}

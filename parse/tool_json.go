package parse

import "encoding/json"

// wrapField is which key of a {"name": …, "arguments": …} wrapper object
// is being scanned.
type wrapField uint8

const (
	fieldNone wrapField = iota
	// fieldName, fieldArgs: the key was read, its value is next.
	fieldName
	fieldArgs
	// fieldNameValue, fieldArgsValue: inside the value.
	fieldNameValue
	fieldArgsValue
)

// maxKeyLen bounds how much of a wrapper's key is kept: longer keys are
// none of the ones looked for.
const maxKeyLen = 16

// jsonResult is how far feedJSON got.
type jsonResult uint8

const (
	// jsonMore: all input was scanned; the value goes on.
	jsonMore jsonResult = iota
	// jsonDone: the value is complete (the call may have failed on the
	// way: check call.active).
	jsonDone
	// jsonFailed: the call failed although its JSON is well formed so
	// far (an undeclared name, arguments that are not an object); the
	// input is positioned after the byte that showed it.
	jsonFailed
	// jsonSyntax: the input starts with a byte that is not JSON; the call
	// has failed.
	jsonSyntax
)

// feedJSON scans the input as the current call's JSON: the arguments
// object itself when the call is bare, else a wrapper object whose "name"
// is announced as soon as its string ends and whose "arguments" (or
// "parameters") bytes are released as they are scanned. On a failed call
// it goes on scanning (its bytes are content), so that a format without
// an end marker can find where the call ends.
func (p *ToolParser) feedJSON() jsonResult {
	c := &p.call
	wrapper := p.base + 1
	argLo := -1
	if c.active && (c.field == fieldArgsValue || c.bare && c.started) {
		argLo = 0 // the arguments go on from the last input
	}
	i := 0
	// settle consumes the first i bytes, releasing the argument bytes
	// among them.
	settle := func() {
		if argLo >= 0 {
			if c.announced {
				p.args(p.in[argLo:i])
			} else if c.active {
				c.pendingArgs = append(c.pendingArgs, p.in[argLo:i]...)
			}
			argLo = -1
		}
		p.eat(i)
		i = 0
	}
	failAt := func() jsonResult {
		settle()
		p.fail()
		return jsonFailed
	}
	for i < len(p.in) {
		b := p.in[i]
		wasDepth, wasKey := p.scan.depth(), p.scan.inKey()
		startsValue := p.scan.expectsValue() && !isJSONSpace(b)
		if !p.scan.step(b) {
			settle()
			p.fail()
			return jsonSyntax
		}
		i++
		if startsValue && wasDepth == p.base {
			c.started = true
			if b != '{' && c.active {
				return failAt() // a call (or its arguments) must be an object
			}
			if c.bare && c.active {
				argLo = i - 1
			}
		}
		if p.scan.depth() == p.base && c.started && (p.scan.done() || p.scan.state == scanAfter) {
			settle()
			if c.bare {
				c.haveAr = true
			} else if !c.haveName {
				p.fail() // a wrapper without a name
			}
			c.jsonDone = c.active
			return jsonDone
		}
		if !c.active || c.bare {
			continue
		}
		switch {
		case wasKey && p.scan.depth() == wrapper:
			if p.scan.inKey() {
				if len(c.key) <= maxKeyLen {
					c.key = append(c.key, b)
				}
				continue
			}
			// The key ended.
			switch string(c.key) {
			case "name":
				if c.haveName {
					return failAt()
				}
				c.field, c.haveName = fieldName, true
			case "arguments", "parameters":
				if c.haveAr {
					return failAt()
				}
				c.field, c.haveAr = fieldArgs, true
			default:
				c.field = fieldNone // another key: its value is skipped
			}
			c.key = c.key[:0]
		case startsValue && wasDepth == wrapper && c.field == fieldName:
			if b != '"' {
				return failAt()
			}
			c.field, c.nameText = fieldNameValue, c.nameText[:0]
		case startsValue && wasDepth == wrapper && c.field == fieldArgs:
			if b != '{' {
				return failAt()
			}
			c.field, argLo = fieldArgsValue, i-1
		case c.field == fieldNameValue:
			if p.scan.state != scanAfter {
				if len(c.nameText) > 4*maxNameLen {
					return failAt()
				}
				c.nameText = append(c.nameText, b)
				continue
			}
			c.field = fieldNone
			if err := json.Unmarshal(append(append([]byte{'"'}, c.nameText...), '"'), &c.name); err != nil {
				return failAt()
			}
			settle()
			if !p.announce() {
				return jsonFailed
			}
		case c.field == fieldArgsValue && p.scan.depth() == wrapper:
			c.field = fieldNone
			settle()
		}
	}
	settle()
	return jsonMore
}

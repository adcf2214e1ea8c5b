package template

import (
	"fmt"
)

// The parser follows jinja2.parser.Parser: the same statements, the same
// operator precedence (including Jinja's left-associative "**" and filters
// binding tighter than unary minus's operand), the same places where a
// tuple or an inline if is allowed.

type parser struct {
	toks  []token
	pos   int
	loops int // enclosing for bodies, for break/continue
}

func parse(toks []token) ([]node, error) {
	p := &parser{toks: toks}
	body, err := p.subparse(nil)
	if err != nil {
		return nil, err
	}
	if p.cur().typ != tEOF {
		return nil, p.errf("unexpected %s", p.cur())
	}
	return body, nil
}

func (p *parser) cur() token  { return p.toks[p.pos] }
func (p *parser) look() token { return p.toks[min(p.pos+1, len(p.toks)-1)] }
func (p *parser) next() token {
	t := p.toks[p.pos]
	if p.pos < len(p.toks)-1 {
		p.pos++
	}
	return t
}

func (p *parser) errf(format string, a ...any) error {
	return &SyntaxError{Line: p.cur().line, Msg: fmt.Sprintf(format, a...)}
}

func (p *parser) isName(v string) bool {
	t := p.cur()
	return t.typ == tName && t.val == v
}

func (p *parser) isOp(v string) bool {
	t := p.cur()
	return t.typ == tOp && t.val == v
}

func (p *parser) skipName(v string) bool {
	if p.isName(v) {
		p.next()
		return true
	}
	return false
}

func (p *parser) skipOp(v string) bool {
	if p.isOp(v) {
		p.next()
		return true
	}
	return false
}

func (p *parser) expectOp(v string) error {
	if !p.skipOp(v) {
		return p.errf("expected '%s', got %s", v, p.cur())
	}
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.cur()
	if t.typ != tName {
		return "", p.errf("expected a name, got %s", t)
	}
	p.next()
	return t.val, nil
}

func (p *parser) expectBlockEnd() error {
	if p.cur().typ != tBlockEnd {
		return p.errf("expected end of statement block, got %s", p.cur())
	}
	p.next()
	return nil
}

// subparse parses nodes until a block tag whose keyword is in ends (the
// parser is then left on that keyword) or the end of the template.
func (p *parser) subparse(ends []string) ([]node, error) {
	var body []node
	for {
		t := p.cur()
		switch t.typ {
		case tEOF:
			if ends != nil {
				return nil, p.errf("unexpected end of template, expected one of %v", ends)
			}
			return body, nil
		case tData:
			p.next()
			body = append(body, &textNode{text: t.val})
		case tVarBegin:
			p.next()
			x, err := p.parseTuple(true, nil, false)
			if err != nil {
				return nil, err
			}
			if p.cur().typ != tVarEnd {
				return nil, p.errf("expected end of print statement, got %s", p.cur())
			}
			p.next()
			body = append(body, &outputNode{x: x, line: t.line})
		case tBlockBegin:
			p.next()
			kw := p.cur()
			if kw.typ != tName {
				return nil, p.errf("tag name expected")
			}
			for _, e := range ends {
				if kw.val == e {
					return body, nil
				}
			}
			n, err := p.parseStatement()
			if err != nil {
				return nil, err
			}
			if n != nil {
				body = append(body, n)
			}
		default:
			return nil, p.errf("unexpected %s", t)
		}
	}
}

// parseBody parses statements up to one of ends, consumes the end keyword
// and returns which one it was; the block end of that tag is left for the
// caller unless drop is set.
func (p *parser) parseBody(ends []string, drop bool) ([]node, string, error) {
	if err := p.expectBlockEnd(); err != nil {
		return nil, "", err
	}
	body, err := p.subparse(ends)
	if err != nil {
		return nil, "", err
	}
	end := p.next().val
	if drop {
		if err := p.expectBlockEnd(); err != nil {
			return nil, "", err
		}
	}
	return body, end, nil
}

func (p *parser) parseStatement() (node, error) {
	kw := p.next()
	switch kw.val {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor(kw.line)
	case "set":
		return p.parseSet(kw.line)
	case "macro":
		return p.parseMacro()
	case "call":
		return p.parseCallBlock(kw.line)
	case "filter":
		f, err := p.parseFilterChain(nil, true)
		if err != nil {
			return nil, err
		}
		body, _, err := p.parseBody([]string{"endfilter"}, true)
		if err != nil {
			return nil, err
		}
		return &filterBlockNode{filter: f, body: body, line: kw.line}, nil
	case "with":
		return p.parseWith()
	case "generation":
		body, _, err := p.parseBody([]string{"endgeneration"}, true)
		if err != nil {
			return nil, err
		}
		return &generationNode{body: body}, nil
	case "break", "continue":
		if p.loops == 0 {
			p.pos--
			return nil, p.errf("'%s' outside loop", kw.val)
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if kw.val == "break" {
			return breakNode{}, nil
		}
		return continueNode{}, nil
	}
	p.pos--
	return nil, p.errf("encountered unknown tag '%s'", kw.val)
}

func (p *parser) parseIf() (node, error) {
	n := &ifNode{}
	for {
		cond, err := p.parseTuple(false, nil, false)
		if err != nil {
			return nil, err
		}
		body, end, err := p.parseBody([]string{"elif", "else", "endif"}, false)
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, cond)
		n.bodies = append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			n.orElse, _, err = p.parseBody([]string{"endif"}, true)
			return n, err
		}
		return n, p.expectBlockEnd()
	}
}

func (p *parser) parseFor(line int) (node, error) {
	tgt, err := p.parseAssignTarget([]string{"in"}, false)
	if err != nil {
		return nil, err
	}
	if !p.skipName("in") {
		return nil, p.errf("expected 'in', got %s", p.cur())
	}
	iter, err := p.parseTuple(false, []string{"recursive"}, false)
	if err != nil {
		return nil, err
	}
	n := &forNode{target: tgt, iter: iter, line: line}
	if p.skipName("if") {
		if n.cond, err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	n.recursive = p.skipName("recursive")
	p.loops++
	body, end, err := p.parseBody([]string{"endfor", "else"}, false)
	p.loops--
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		n.orElse, _, err = p.parseBody([]string{"endfor"}, true)
		return n, err
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseSet(line int) (node, error) {
	tgt, err := p.parseAssignTarget(nil, true)
	if err != nil {
		return nil, err
	}
	if p.skipOp("=") {
		x, err := p.parseTuple(true, nil, false)
		if err != nil {
			return nil, err
		}
		return &setNode{target: tgt, x: x, line: line}, p.expectBlockEnd()
	}
	var f *filterExpr
	if p.isOp("|") {
		if f, err = p.parseFilterChain(nil, false); err != nil {
			return nil, err
		}
	}
	body, _, err := p.parseBody([]string{"endset"}, true)
	if err != nil {
		return nil, err
	}
	return &setBlockNode{target: tgt, filter: f, body: body, line: line}, nil
}

func (p *parser) parseAssignTarget(extraEnds []string, withNamespace bool) (target, error) {
	if withNamespace && p.cur().typ == tName && p.look().typ == tOp && p.look().val == "." {
		ns := p.next().val
		p.next()
		attr, err := p.expectName()
		if err != nil {
			return target{}, err
		}
		return target{ns: ns, attr: attr}, nil
	}
	var items []target
	isTuple := false
	for {
		if len(items) > 0 {
			if err := p.expectOp(","); err != nil {
				return target{}, err
			}
		}
		if p.isTupleEnd(extraEnds) {
			break
		}
		var t target
		if p.skipOp("(") {
			inner, err := p.parseAssignTarget(nil, false)
			if err != nil {
				return target{}, err
			}
			if err := p.expectOp(")"); err != nil {
				return target{}, err
			}
			t = inner
		} else {
			name, err := p.expectName()
			if err != nil {
				return target{}, err
			}
			switch name {
			case "true", "false", "True", "False", "none", "None":
				return target{}, p.errf("can't assign to %s", name)
			}
			t = target{name: name}
		}
		items = append(items, t)
		if p.isOp(",") {
			isTuple = true
		} else {
			break
		}
	}
	if !isTuple {
		if len(items) == 0 {
			return target{}, p.errf("expected an assignment target")
		}
		return items[0], nil
	}
	return target{items: items}, nil
}

func (p *parser) parseMacro() (node, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	params, err := p.parseSignature()
	if err != nil {
		return nil, err
	}
	loops := p.loops
	p.loops = 0 // a macro body is a function of its own
	body, _, err := p.parseBody([]string{"endmacro"}, true)
	p.loops = loops
	if err != nil {
		return nil, err
	}
	n := &macroNode{name: name, params: params, body: body}
	n.usesVarg = usesName(body, "varargs")
	n.usesKwa = usesName(body, "kwargs")
	return n, nil
}

func (p *parser) parseSignature() ([]param, error) {
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	var params []param
	for !p.isOp(")") {
		if len(params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		prm := param{name: name}
		if p.skipOp("=") {
			if prm.def, err = p.parseExpression(true); err != nil {
				return nil, err
			}
		} else if len(params) > 0 && params[len(params)-1].def != nil {
			return nil, p.errf("non-default argument follows default argument")
		}
		params = append(params, prm)
	}
	p.next()
	return params, nil
}

func (p *parser) parseCallBlock(line int) (node, error) {
	var params []param
	var err error
	if p.isOp("(") {
		if params, err = p.parseSignature(); err != nil {
			return nil, err
		}
	}
	x, err := p.parseExpression(true)
	if err != nil {
		return nil, err
	}
	call, ok := x.(*callExpr)
	if !ok {
		return nil, p.errf("expected call")
	}
	loops := p.loops
	p.loops = 0
	body, _, err := p.parseBody([]string{"endcall"}, true)
	p.loops = loops
	if err != nil {
		return nil, err
	}
	return &callBlockNode{call: call, params: params, body: body, line: line}, nil
}

func (p *parser) parseWith() (node, error) {
	n := &withNode{}
	for p.cur().typ != tBlockEnd {
		if len(n.targets) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		t, err := p.parseAssignTarget(nil, false)
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		x, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		n.targets = append(n.targets, t)
		n.vals = append(n.vals, x)
	}
	body, _, err := p.parseBody([]string{"endwith"}, true)
	n.body = body
	return n, err
}

// usesName reports whether a macro body refers to name (Jinja only gives a
// macro varargs/kwargs when its body mentions them).
func usesName(body []node, name string) bool {
	found := false
	walkNodes(body, false, func(e expr, soft bool) {
		if n, ok := e.(*nameExpr); ok && n.name == name {
			found = true
		}
	})
	return found
}

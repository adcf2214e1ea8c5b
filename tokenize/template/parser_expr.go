package template

// Expression grammar, loosest binding first (jinja2.parser):
//
//	expression  = or ["if" or ["else" expression]]
//	or          = and {"or" and}
//	and         = not {"and" not}
//	not         = "not" not | compare
//	compare     = math1 {("=="|"!="|"<"|"<="|">"|">="|"in"|"not in") math1}
//	math1       = concat {("+"|"-") concat}
//	concat      = math2 {"~" math2}
//	math2       = pow {("*"|"/"|"//"|"%") pow}
//	pow         = unary {"**" unary}
//	unary       = ("-"|"+") unary-without-filters | primary postfix ; then filters/tests

func (p *parser) isTupleEnd(extraEnds []string) bool {
	t := p.cur()
	switch t.typ {
	case tVarEnd, tBlockEnd, tEOF:
		return true
	case tOp:
		return t.val == ")"
	case tName:
		for _, e := range extraEnds {
			if t.val == e {
				return true
			}
		}
	}
	return false
}

// parseTuple parses an expression or an unparenthesised tuple "a, b".
func (p *parser) parseTuple(withCondExpr bool, extraEnds []string, explicitParens bool) (expr, error) {
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		if p.isTupleEnd(extraEnds) {
			break
		}
		x, err := p.parseExpression(withCondExpr)
		if err != nil {
			return nil, err
		}
		items = append(items, x)
		if p.isOp(",") {
			isTuple = true
		} else {
			break
		}
	}
	if !isTuple {
		if len(items) > 0 {
			return items[0], nil
		}
		if !explicitParens {
			return nil, p.errf("expected an expression, got %s", p.cur())
		}
	}
	return &tupleExpr{items: items}, nil
}

func (p *parser) parseExpression(withCondExpr bool) (expr, error) {
	if withCondExpr {
		return p.parseCondExpr()
	}
	return p.parseOr()
}

func (p *parser) parseCondExpr() (expr, error) {
	x, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		test, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var no expr
		if p.skipName("else") {
			if no, err = p.parseCondExpr(); err != nil {
				return nil, err
			}
		}
		x = &condExpr{test: test, yes: x, no: no}
	}
	return x, nil
}

func (p *parser) parseOr() (expr, error) {
	x, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.skipName("or") {
		y, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		x = &orExpr{left: x, right: y}
	}
	return x, nil
}

func (p *parser) parseAnd() (expr, error) {
	x, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.skipName("and") {
		y, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		x = &andExpr{left: x, right: y}
	}
	return x, nil
}

func (p *parser) parseNot() (expr, error) {
	if p.skipName("not") {
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &notExpr{x: x}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	x, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	var ops []cmpOp
	for {
		t := p.cur()
		var op string
		switch {
		case t.typ == tOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			p.next()
		case p.isName("in"):
			op = "in"
			p.next()
		case p.isName("not") && p.look().typ == tName && p.look().val == "in":
			op = "notin"
			p.next()
			p.next()
		default:
			if ops == nil {
				return x, nil
			}
			return &cmpExpr{first: x, ops: ops}, nil
		}
		y, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		ops = append(ops, cmpOp{op: op, x: y})
	}
}

func (p *parser) parseBinary(ops []string, sub func() (expr, error)) (expr, error) {
	x, err := sub()
	if err != nil {
		return nil, err
	}
	for {
		t := p.cur()
		matched := ""
		if t.typ == tOp {
			for _, o := range ops {
				if t.val == o {
					matched = o
					break
				}
			}
		}
		if matched == "" {
			return x, nil
		}
		p.next()
		y, err := sub()
		if err != nil {
			return nil, err
		}
		x = &binExpr{op: matched, left: x, right: y}
	}
}

var (
	opsMath1  = []string{"+", "-"}
	opsConcat = []string{"~"}
	opsMath2  = []string{"*", "/", "//", "%"}
	opsPow    = []string{"**"}
)

func (p *parser) parseMath1() (expr, error)  { return p.parseBinary(opsMath1, p.parseConcat) }
func (p *parser) parseConcat() (expr, error) { return p.parseBinary(opsConcat, p.parseMath2) }
func (p *parser) parseMath2() (expr, error)  { return p.parseBinary(opsMath2, p.parsePow) }
func (p *parser) parsePow() (expr, error) {
	return p.parseBinary(opsPow, func() (expr, error) { return p.parseUnary(true) })
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	var x expr
	var err error
	switch {
	case p.isOp("-"):
		p.next()
		if x, err = p.parseUnary(false); err != nil {
			return nil, err
		}
		x = &negExpr{x: x}
	case p.isOp("+"):
		p.next()
		if x, err = p.parseUnary(false); err != nil {
			return nil, err
		}
		x = &posExpr{x: x}
	default:
		if x, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if x, err = p.parsePostfix(x); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(x)
	}
	return x, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.typ {
	case tName:
		p.next()
		switch t.val {
		case "true", "True":
			return &constExpr{val: true}, nil
		case "false", "False":
			return &constExpr{val: false}, nil
		case "none", "None":
			return &constExpr{val: nil}, nil
		}
		return &nameExpr{name: t.val}, nil
	case tString:
		s := t.val
		p.next()
		for p.cur().typ == tString {
			s += p.next().val
		}
		return &constExpr{val: s}, nil
	case tInt, tFloat:
		p.next()
		return &constExpr{val: t.num}, nil
	case tOp:
		switch t.val {
		case "(":
			p.next()
			x, err := p.parseTuple(true, nil, true)
			if err != nil {
				return nil, err
			}
			return x, p.expectOp(")")
		case "[":
			p.next()
			l := &listExpr{}
			for !p.isOp("]") {
				if len(l.items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("]") {
						break
					}
				}
				x, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, x)
			}
			p.next()
			return l, nil
		case "{":
			p.next()
			d := &dictExpr{}
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			p.next()
			return d, nil
		}
	}
	return nil, p.errf("unexpected %s", t)
}

func (p *parser) parsePostfix(x expr) (expr, error) {
	for {
		var err error
		switch {
		case p.isOp("."):
			p.next()
			t := p.next()
			switch t.typ {
			case tName:
				x = &attrExpr{obj: x, attr: t.val}
			case tInt:
				x = &itemExpr{obj: x, key: &constExpr{val: t.num}}
			default:
				return nil, p.errf("expected name or number")
			}
		case p.isOp("["):
			p.next()
			var keys []expr
			for !p.isOp("]") {
				if len(keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
				}
				k, err := p.parseSubscribed()
				if err != nil {
					return nil, err
				}
				keys = append(keys, k)
			}
			p.next()
			switch len(keys) {
			case 1:
				x = &itemExpr{obj: x, key: keys[0]}
			default:
				x = &itemExpr{obj: x, key: &tupleExpr{items: keys}}
			}
		case p.isOp("("):
			if x, err = p.parseCall(x); err != nil {
				return nil, err
			}
		default:
			return x, nil
		}
	}
}

func (p *parser) parseSubscribed() (expr, error) {
	var parts [3]expr
	if !p.isOp(":") {
		x, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		if !p.isOp(":") {
			return x, nil
		}
		parts[0] = x
	}
	p.next() // ':'
	var err error
	if !p.isOp("]") && !p.isOp(",") && !p.isOp(":") {
		if parts[1], err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	if p.skipOp(":") {
		if !p.isOp("]") && !p.isOp(",") {
			if parts[2], err = p.parseExpression(true); err != nil {
				return nil, err
			}
		}
	}
	return &sliceExpr{start: parts[0], stop: parts[1], step: parts[2]}, nil
}

func (p *parser) parseCallArgs() (args, error) {
	var a args
	if err := p.expectOp("("); err != nil {
		return a, err
	}
	first := true
	for !p.isOp(")") {
		if !first {
			if err := p.expectOp(","); err != nil {
				return a, err
			}
			if p.isOp(")") {
				break
			}
		}
		first = false
		switch {
		case p.isOp("*"):
			p.next()
			x, err := p.parseExpression(true)
			if err != nil {
				return a, err
			}
			a.dynArgs = x
		case p.isOp("**"):
			p.next()
			x, err := p.parseExpression(true)
			if err != nil {
				return a, err
			}
			a.dynKwargs = x
		case p.cur().typ == tName && p.look().typ == tOp && p.look().val == "=":
			name := p.next().val
			p.next()
			x, err := p.parseExpression(true)
			if err != nil {
				return a, err
			}
			a.kw = append(a.kw, kwExpr{name: name, x: x})
		default:
			if len(a.kw) > 0 || a.dynArgs != nil || a.dynKwargs != nil {
				return a, p.errf("invalid syntax for function call expression")
			}
			x, err := p.parseExpression(true)
			if err != nil {
				return a, err
			}
			a.pos = append(a.pos, x)
		}
	}
	p.next()
	return a, nil
}

func (p *parser) parseCall(x expr) (expr, error) {
	a, err := p.parseCallArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{fn: x, args: a}, nil
}

func (p *parser) parseFilterExpr(x expr) (expr, error) {
	for {
		var err error
		switch {
		case p.isOp("|"):
			if x, err = p.parseFilterChain(x, false); err != nil {
				return nil, err
			}
		case p.isName("is"):
			if x, err = p.parseTest(x); err != nil {
				return nil, err
			}
		case p.isOp("("):
			if x, err = p.parseCall(x); err != nil {
				return nil, err
			}
		default:
			return x, nil
		}
	}
}

// parseFilterChain parses "|f(args)|g" applied to x. With startInline the
// first filter name comes without a pipe ({% filter upper %}).
func (p *parser) parseFilterChain(x expr, startInline bool) (*filterExpr, error) {
	var f *filterExpr
	for p.isOp("|") || startInline {
		if !startInline {
			p.next()
		}
		startInline = false
		line := p.cur().line
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		for p.isOp(".") {
			p.next()
			n, err := p.expectName()
			if err != nil {
				return nil, err
			}
			name += "." + n
		}
		var a args
		if p.isOp("(") {
			if a, err = p.parseCallArgs(); err != nil {
				return nil, err
			}
		}
		f = &filterExpr{x: x, name: name, args: a, line: line}
		x = f
	}
	return f, nil
}

func (p *parser) parseTest(x expr) (expr, error) {
	line := p.next().line // is
	negated := p.skipName("not")
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	for p.isOp(".") {
		p.next()
		n, err := p.expectName()
		if err != nil {
			return nil, err
		}
		name += "." + n
	}
	var a args
	t := p.cur()
	switch {
	case p.isOp("("):
		if a, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	case (t.typ == tName || t.typ == tString || t.typ == tInt || t.typ == tFloat ||
		(t.typ == tOp && (t.val == "(" || t.val == "[" || t.val == "{"))) &&
		!p.isName("else") && !p.isName("or") && !p.isName("and"):
		if p.isName("is") {
			return nil, p.errf("You cannot chain multiple tests with is")
		}
		arg, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if arg, err = p.parsePostfix(arg); err != nil {
			return nil, err
		}
		a.pos = []expr{arg}
	}
	var out expr = &testExpr{x: x, name: name, args: a, line: line}
	if negated {
		out = &notExpr{x: out}
	}
	return out, nil
}

package template

import "fmt"

// walkNodes calls visit for every expression in body, depth first. soft
// tells whether the expression sits in what Jinja's compiler calls a soft
// frame: the test or a branch of an {% if %} or of an inline if. Bodies
// that get their own frame (loops, macros, call and filter blocks, with,
// block set) start hard again.
func walkNodes(body []node, soft bool, visit func(e expr, soft bool)) {
	for _, n := range body {
		switch x := n.(type) {
		case *outputNode:
			walkExpr(x.x, soft, visit)
		case *ifNode:
			for i := range x.conds {
				walkExpr(x.conds[i], true, visit)
				walkNodes(x.bodies[i], true, visit)
			}
			walkNodes(x.orElse, true, visit)
		case *forNode:
			walkExpr(x.iter, soft, visit)
			walkExpr(x.cond, false, visit)
			walkNodes(x.body, false, visit)
			walkNodes(x.orElse, false, visit)
		case *setNode:
			walkExpr(x.x, soft, visit)
		case *setBlockNode:
			if x.filter != nil {
				walkExpr(x.filter, soft, visit)
			}
			walkNodes(x.body, false, visit)
		case *macroNode:
			for _, p := range x.params {
				walkExpr(p.def, false, visit)
			}
			walkNodes(x.body, false, visit)
		case *callBlockNode:
			walkExpr(x.call, soft, visit)
			for _, p := range x.params {
				walkExpr(p.def, false, visit)
			}
			walkNodes(x.body, false, visit)
		case *filterBlockNode:
			walkExpr(x.filter, soft, visit)
			walkNodes(x.body, false, visit)
		case *withNode:
			for _, v := range x.vals {
				walkExpr(v, soft, visit)
			}
			walkNodes(x.body, false, visit)
		case *generationNode:
			walkNodes(x.body, false, visit)
		}
	}
}

func walkArgs(a *args, soft bool, visit func(e expr, soft bool)) {
	for _, x := range a.pos {
		walkExpr(x, soft, visit)
	}
	for _, k := range a.kw {
		walkExpr(k.x, soft, visit)
	}
	walkExpr(a.dynArgs, soft, visit)
	walkExpr(a.dynKwargs, soft, visit)
}

func walkExpr(e expr, soft bool, visit func(e expr, soft bool)) {
	if e == nil {
		return
	}
	if f, ok := e.(*filterExpr); ok && f == nil {
		return
	}
	visit(e, soft)
	switch x := e.(type) {
	case *attrExpr:
		walkExpr(x.obj, soft, visit)
	case *itemExpr:
		walkExpr(x.obj, soft, visit)
		walkExpr(x.key, soft, visit)
	case *sliceExpr:
		walkExpr(x.start, soft, visit)
		walkExpr(x.stop, soft, visit)
		walkExpr(x.step, soft, visit)
	case *listExpr:
		for _, i := range x.items {
			walkExpr(i, soft, visit)
		}
	case *tupleExpr:
		for _, i := range x.items {
			walkExpr(i, soft, visit)
		}
	case *dictExpr:
		for i := range x.keys {
			walkExpr(x.keys[i], soft, visit)
			walkExpr(x.vals[i], soft, visit)
		}
	case *binExpr:
		walkExpr(x.left, soft, visit)
		walkExpr(x.right, soft, visit)
	case *andExpr:
		walkExpr(x.left, soft, visit)
		walkExpr(x.right, soft, visit)
	case *orExpr:
		walkExpr(x.left, soft, visit)
		walkExpr(x.right, soft, visit)
	case *notExpr:
		walkExpr(x.x, soft, visit)
	case *negExpr:
		walkExpr(x.x, soft, visit)
	case *posExpr:
		walkExpr(x.x, soft, visit)
	case *condExpr:
		walkExpr(x.test, true, visit)
		walkExpr(x.yes, true, visit)
		walkExpr(x.no, true, visit)
	case *cmpExpr:
		walkExpr(x.first, soft, visit)
		for _, o := range x.ops {
			walkExpr(o.x, soft, visit)
		}
	case *callExpr:
		walkExpr(x.fn, soft, visit)
		walkArgs(&x.args, soft, visit)
	case *filterExpr:
		walkExpr(x.x, soft, visit)
		walkArgs(&x.args, soft, visit)
	case *testExpr:
		walkExpr(x.x, soft, visit)
		walkArgs(&x.args, soft, visit)
	}
}

// checkNames rejects unknown filters and tests at compile time, as Jinja
// does, except inside if branches and inline ifs where Jinja defers the
// error until the expression runs.
func checkNames(body []node) error {
	var err error
	walkNodes(body, false, func(e expr, soft bool) {
		if err != nil || soft {
			return
		}
		switch x := e.(type) {
		case *filterExpr:
			if _, ok := filters[x.name]; !ok {
				err = &SyntaxError{Line: x.line, Msg: fmt.Sprintf("No filter named '%s'.", x.name)}
			}
		case *testExpr:
			if _, ok := tests[x.name]; !ok {
				err = &SyntaxError{Line: x.line, Msg: fmt.Sprintf("No test named '%s'.", x.name)}
			}
		}
	})
	return err
}

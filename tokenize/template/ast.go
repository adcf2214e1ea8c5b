package template

// Expressions. Each evaluates to a template value (see values.go).
type expr interface {
	eval(r *renderer, sc *scope) (any, error)
}

type (
	constExpr struct{ val any }
	nameExpr  struct{ name string }
	attrExpr  struct {
		obj  expr
		attr string
	}
	itemExpr struct {
		obj expr
		key expr
	}
	sliceExpr struct{ start, stop, step expr } // only as itemExpr.key
	listExpr  struct{ items []expr }
	tupleExpr struct{ items []expr }
	dictExpr  struct{ keys, vals []expr }
	binExpr   struct {
		op          string // + - * / // % ** ~
		left, right expr
	}
	andExpr  struct{ left, right expr }
	orExpr   struct{ left, right expr }
	notExpr  struct{ x expr }
	negExpr  struct{ x expr }
	posExpr  struct{ x expr }
	condExpr struct{ test, yes, no expr } // no may be nil
	cmpExpr  struct {
		first expr
		ops   []cmpOp
	}
	callExpr struct {
		fn expr
		args
	}
	filterExpr struct {
		x    expr // nil inside {% filter %} and {% set x | f %}: the body
		name string
		args
		line int
	}
	testExpr struct {
		x    expr
		name string
		args
		line int
	}
)

type cmpOp struct {
	op string // == != < <= > >= in notin
	x  expr
}

// args are the arguments of a call, filter or test.
type args struct {
	pos       []expr
	kw        []kwExpr
	dynArgs   expr // *x
	dynKwargs expr // **x
}

type kwExpr struct {
	name string
	x    expr
}

// Statements.
type node interface {
	exec(r *renderer, sc *scope) error
}

type (
	textNode   struct{ text string }
	outputNode struct {
		x    expr
		line int
	}
	ifNode struct {
		conds  []expr
		bodies [][]node
		orElse []node
	}
	forNode struct {
		target    target
		iter      expr
		cond      expr // inline "if" filter; nil if absent
		body      []node
		orElse    []node
		recursive bool
		line      int
	}
	setNode struct {
		target target
		x      expr
		line   int
	}
	setBlockNode struct {
		target target
		filter *filterExpr // chain with a nil innermost x; may be nil
		body   []node
		line   int
	}
	macroNode struct {
		name     string
		params   []param
		body     []node
		usesVarg bool
		usesKwa  bool
	}
	callBlockNode struct {
		call   *callExpr
		params []param
		body   []node
		line   int
	}
	filterBlockNode struct {
		filter *filterExpr
		body   []node
		line   int
	}
	withNode struct {
		targets []target
		vals    []expr
		body    []node
	}
	breakNode    struct{}
	continueNode struct{}
	// generationNode is transformers' {% generation %}: it renders its body.
	generationNode struct{ body []node }
)

type param struct {
	name string
	def  expr // nil: required
}

// target is the left side of an assignment or a for loop.
type target struct {
	name  string   // a plain name
	items []target // a tuple of targets (name == "")
	ns    string   // ns.attr assignment: ns is the namespace variable
	attr  string
}

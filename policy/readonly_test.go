package policy_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/workers"
)

// TestPoliciesOnlyReadWorkers: a policy reads its candidates through
// workers.View, and calls nothing of the worker a View stands for. Its
// source calls no method a Worker has and a View lacks (SetHealthy,
// Backend, Close, Acquire, ...), and takes a View's Worker only to name it
// as a Decision's Worker, for the caller to act on.
func TestPoliciesOnlyReadWorkers(t *testing.T) {
	forbidden := map[string]bool{}
	worker, view := reflect.TypeFor[*workers.Worker](), reflect.TypeFor[workers.View]()
	for i := range worker.NumMethod() {
		if n := worker.Method(i).Name; !hasMethod(view, n) {
			forbidden[n] = true
		}
	}
	if !forbidden["SetHealthy"] || !forbidden["Backend"] || !forbidden["Close"] {
		t.Fatalf("a View has a Worker's mutators: forbidden %v", forbidden)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		handedOn := map[ast.Expr]bool{} // the Worker() calls that are a Decision's Worker
		ast.Inspect(f, func(n ast.Node) bool {
			if kv, ok := n.(*ast.KeyValueExpr); ok {
				if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Worker" {
					handedOn[kv.Value] = true
				}
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch {
			case forbidden[sel.Sel.Name]:
				t.Errorf("%s: a policy calls %s, which a worker has and its View lacks", fset.Position(call.Pos()), sel.Sel.Name)
			case sel.Sel.Name == "Worker" && len(call.Args) == 0 && !handedOn[call]:
				t.Errorf("%s: a policy takes a View's Worker other than to name it in a Decision", fset.Position(call.Pos()))
			}
			return true
		})
	}
}

func hasMethod(t reflect.Type, name string) bool {
	_, ok := t.MethodByName(name)
	return ok
}

package workers_test

import (
	"testing"

	"github.com/kvgate/kvgate/workers"
)

// TestViews: a fleet's slice becomes views without a copy, each view is
// its worker (equal views, equal workers), and it reads what the worker
// says now.
func TestViews(t *testing.T) {
	a := workers.NewWorker("grpc://a:1", workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{KVCapacityTokens: 4096}, nil, nil)
	b := workers.NewWorker("grpc://b:1", workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, nil, nil)
	ws := []*workers.Worker{a, b}
	vs := workers.Views(ws)
	if len(vs) != 2 || vs[0] != workers.ViewOf(a) || vs[1] != workers.ViewOf(b) || vs[0] == vs[1] {
		t.Fatalf("Views = %v, want views of a and b", vs)
	}
	if vs[0].Worker() != a || vs[1].Worker() != b {
		t.Fatal("a view hands back another worker")
	}
	ws[1] = a // the views share the slice's memory
	if vs[1] != workers.ViewOf(a) {
		t.Fatal("Views copied the slice")
	}
	if workers.Views(nil) != nil || !(workers.View{}).IsZero() || vs[0].IsZero() {
		t.Fatal("zero views")
	}
	release := a.Acquire()
	a.SetDraining(true)
	if v := vs[0]; v.URL() != "grpc://a:1" || v.Load() != 1 || !v.Draining() || v.Available() || v.KVCapacityTokens() != 4096 {
		t.Fatalf("view of a: url %s load %d draining %v available %v capacity %d", v.URL(), v.Load(), v.Draining(), v.Available(), v.KVCapacityTokens())
	}
	release()
	if vs[0].Load() != 0 {
		t.Fatal("the view's load did not follow the worker's")
	}
}

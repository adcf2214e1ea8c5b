package workers_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/kvgate/kvgate/workers"
)

func urls(ws []*workers.Worker) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.URL()
	}
	return out
}

// TestRegistrySnapshots: every change publishes a new generation; earlier
// snapshots stay as they were.
func TestRegistrySnapshots(t *testing.T) {
	reg := workers.NewRegistry()
	a, b, c := newTestWorker("grpc://a:1"), newTestWorker("grpc://b:1"), newTestWorker("grpc://c:1")
	placeholder := newTestWorker("grpc://b:1")

	empty := reg.Current()
	steps := []struct {
		name    string
		do      func() error
		wantGen uint64
		want    []*workers.Worker
		wantErr error
	}{
		{"add a", func() error { return reg.Add(a) }, 1, []*workers.Worker{a}, nil},
		{"add placeholder for b", func() error { return reg.Add(placeholder) }, 2, []*workers.Worker{a, placeholder}, nil},
		{"add c", func() error { return reg.Add(c) }, 3, []*workers.Worker{a, placeholder, c}, nil},
		{"a second a is refused", func() error { return reg.Add(newTestWorker("grpc://a:1")) }, 3, []*workers.Worker{a, placeholder, c}, workers.ErrWorkerExists},
		{"replace keeps the position", func() error { return reg.Replace(placeholder, b) }, 4, []*workers.Worker{a, b, c}, nil},
		{"replacing what left is refused", func() error { return reg.Replace(placeholder, b) }, 4, []*workers.Worker{a, b, c}, workers.ErrWorkerNotFound},
		{"replace may not duplicate another URL", func() error { return reg.Replace(b, newTestWorker("grpc://c:1")) }, 4, []*workers.Worker{a, b, c}, workers.ErrWorkerExists},
		{"remove a by host:port", func() error {
			w, err := reg.Remove("a:1")
			if err == nil && w != a {
				return fmt.Errorf("removed %v, want a", w)
			}
			return err
		}, 5, []*workers.Worker{b, c}, nil},
		{"removing it again is refused", func() error { _, err := reg.Remove("grpc://a:1"); return err }, 5, []*workers.Worker{b, c}, workers.ErrWorkerNotFound},
	}
	for _, s := range steps {
		before := reg.Current()
		err := s.do()
		if !errors.Is(err, s.wantErr) {
			t.Fatalf("%s: error %v, want %v", s.name, err, s.wantErr)
		}
		cur := reg.Current()
		if cur.Generation != s.wantGen || !slices.Equal(cur.Workers, s.want) {
			t.Fatalf("%s: generation %d %v, want %d %v", s.name, cur.Generation, urls(cur.Workers), s.wantGen, urls(s.want))
		}
		if err != nil && cur != before {
			t.Errorf("%s: a refused change published a new snapshot", s.name)
		}
	}
	if empty.Generation != 0 || len(empty.Workers) != 0 {
		t.Errorf("the first snapshot changed: %+v", empty)
	}
	if got, ok := reg.Get("b:1"); !ok || got != b {
		t.Errorf("Get(b:1) = %v, %v", got, ok)
	}
	if snap := reg.Snapshot(); !slices.Equal(snap, []*workers.Worker{b, c}) {
		t.Errorf("Snapshot() = %v", urls(snap))
	}
}

func TestSnapshotWithRole(t *testing.T) {
	reg := workers.NewRegistry()
	p := workers.NewWorker("grpc://p:1", workers.ProtocolSGLang, workers.RolePrefill, workers.ModelInfo{}, nil, nil)
	d := workers.NewWorker("grpc://d:1", workers.ProtocolSGLang, workers.RoleDecode, workers.ModelInfo{}, nil, nil)
	r := newTestWorker("grpc://r:1")
	for _, w := range []*workers.Worker{p, d, r} {
		if err := reg.Add(w); err != nil {
			t.Fatal(err)
		}
	}
	for role, want := range map[workers.Role][]*workers.Worker{
		workers.RolePrefill: {p}, workers.RoleDecode: {d}, workers.RoleRegular: {r},
	} {
		if got := reg.Current().WithRole(role); !slices.Equal(got, want) {
			t.Errorf("Current().WithRole(%v) = %v", role, urls(got))
		}
		if got := reg.WithRole(role); !slices.Equal(got, want) {
			t.Errorf("WithRole(%v) = %v", role, urls(got))
		}
		if got := reg.Current().Role(role); !slices.Equal(got, want) {
			t.Errorf("Current().Role(%v) = %v", role, urls(got))
		}
		hand := &workers.Snapshot{Workers: []*workers.Worker{p, d, r}}
		if got := hand.Role(role); !slices.Equal(got, want) {
			t.Errorf("a hand-built snapshot's Role(%v) = %v", role, urls(got))
		}
	}
	if got := workers.NewRegistry().WithRole(workers.RoleRegular); got != nil {
		t.Errorf("empty registry: WithRole = %v, want nil", urls(got))
	}
	if got := workers.NewRegistry().Current().Role(workers.RoleRegular); got != nil {
		t.Errorf("empty registry: Role = %v, want nil", urls(got))
	}
	// Role is asked for on every request: it must not allocate.
	snap := reg.Current()
	if n := testing.AllocsPerRun(100, func() { _ = snap.Role(workers.RoleRegular) }); n != 0 {
		t.Errorf("Role allocates %v times per call", n)
	}
}

// TestRegistryWatch: watchers hear every change in generation order, a
// Replace as one change with both sides, and nothing after stop.
func TestRegistryWatch(t *testing.T) {
	reg := workers.NewRegistry()
	var got []string
	stop := reg.Watch(func(c workers.Change) {
		got = append(got, fmt.Sprintf("%d +%v -%v", c.Generation, urls(c.Added), urls(c.Removed)))
	})
	a, b := newTestWorker("grpc://a:1"), newTestWorker("grpc://a:1")
	_ = reg.Add(a)
	_ = reg.Add(a) // refused: no notification
	_ = reg.Replace(a, b)
	_, _ = reg.Remove("a:1")
	stop()
	_ = reg.Add(a)
	want := []string{"1 +[grpc://a:1] -[]", "2 +[grpc://a:1] -[grpc://a:1]", "3 +[] -[grpc://a:1]"}
	if !slices.Equal(got, want) {
		t.Errorf("changes:\n%q\nwant\n%q", got, want)
	}
}

// TestRegistryConcurrentReaders runs readers against writers under -race:
// every snapshot a reader sees is internally consistent (its generation
// matches its size, as this test only adds then removes).
func TestRegistryConcurrentReaders(t *testing.T) {
	reg := workers.NewRegistry()
	const n = 200
	var gens []uint64
	stop := reg.Watch(func(c workers.Change) { gens = append(gens, c.Generation) })
	defer stop()

	done := make(chan struct{})
	var readers sync.WaitGroup
	for range 4 {
		readers.Go(func() {
			var last uint64
			for {
				select {
				case <-done:
					return
				default:
				}
				s := reg.Current()
				if s.Generation < last {
					t.Errorf("generation went back from %d to %d", last, s.Generation)
					return
				}
				last = s.Generation
				want := int(s.Generation)
				if s.Generation > n {
					want = 2*n - int(s.Generation)
				}
				if len(s.Workers) != want {
					t.Errorf("generation %d has %d workers, want %d", s.Generation, len(s.Workers), want)
					return
				}
				for _, w := range s.Workers {
					_ = w.Available()
				}
				_ = reg.WithRole(workers.RoleRegular)
			}
		})
	}
	for i := range n {
		if err := reg.Add(newTestWorker(fmt.Sprintf("grpc://w:%d", i+1))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if _, err := reg.Remove(fmt.Sprintf("grpc://w:%d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	readers.Wait()
	if len(gens) != 2*n || gens[0] != 1 || gens[len(gens)-1] != 2*n {
		t.Errorf("watcher saw %d changes", len(gens))
	}
	for i := 1; i < len(gens); i++ {
		if gens[i] != gens[i-1]+1 {
			t.Fatalf("notifications out of order at %d: %d after %d", i, gens[i], gens[i-1])
		}
	}
}

// TestSnapshotGet: a published snapshot finds each worker by its URL through
// its index, after removals shift positions, exactly as a snapshot built by
// hand finds it by scanning.
func TestSnapshotGet(t *testing.T) {
	reg := workers.NewRegistry()
	var ws []*workers.Worker
	for i := range 6 {
		w := newTestWorker(fmt.Sprintf("grpc://w%d:1", i))
		ws = append(ws, w)
		if err := reg.Add(w); err != nil {
			t.Fatal(err)
		}
	}
	for _, gone := range []string{"grpc://w1:1", "grpc://w4:1"} {
		if _, err := reg.Remove(gone); err != nil {
			t.Fatal(err)
		}
	}
	published := reg.Current()
	byHand := &workers.Snapshot{Generation: published.Generation, Workers: published.Workers}
	for _, w := range ws {
		want := w.URL() != "grpc://w1:1" && w.URL() != "grpc://w4:1"
		for name, s := range map[string]*workers.Snapshot{"published": published, "by hand": byHand} {
			got, ok := s.Get(w.URL())
			if ok != want || (ok && got != w) {
				t.Errorf("%s: Get(%s) = %v, %v; registered: %v", name, w.URL(), got, ok, want)
			}
		}
	}
	if _, ok := published.Get("grpc://nobody:1"); ok {
		t.Error("Get found a worker never registered")
	}
}

package policy_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// fleet builds n workers with no backend; policies only read health and load.
func fleet(n int) []*workers.Worker {
	ws := make([]*workers.Worker, n)
	for i := range ws {
		url := fmt.Sprintf("grpc://127.0.0.1:%d", 9000+i)
		ws[i] = workers.NewWorker(url, workers.ProtocolSGLang, workers.RoleRegular, workers.ModelInfo{}, nil, nil)
	}
	return ws
}

// busy puts n requests in flight on w and returns their release.
func busy(w *workers.Worker, n int) func() {
	var rs []func()
	for range n {
		rs = append(rs, w.Acquire())
	}
	return func() {
		for _, r := range rs {
			r()
		}
	}
}

// draws is a deterministic Intn that returns the given values in turn (mod n).
func draws(vals ...int) policy.Intn {
	i := 0
	return func(n int) int {
		v := vals[i%len(vals)] % n
		i++
		return v
	}
}

func selectN(t *testing.T, p policy.Policy, ws []*workers.Worker, n int) []string {
	t.Helper()
	var got []string
	for range n {
		d, err := p.Select(context.Background(), &policy.Request{}, workers.Views(ws))
		if err != nil {
			t.Fatalf("%s: Select: %v", p.Name(), err)
		}
		got = append(got, d.Worker.URL())
	}
	return got
}

func TestRoundRobinCyclesInOrder(t *testing.T) {
	ws := fleet(3)
	got := selectN(t, policy.NewRoundRobin(), ws, 6)
	for i, u := range got {
		if want := ws[i%3].URL(); u != want {
			t.Fatalf("selection %d = %s, want %s (all: %v)", i, u, want, got)
		}
	}
}

func TestRoundRobinSkipsUnhealthy(t *testing.T) {
	ws := fleet(3)
	ws[1].SetHealthy(false)
	for _, u := range selectN(t, policy.NewRoundRobin(), ws, 6) {
		if u == ws[1].URL() {
			t.Fatalf("round_robin chose unhealthy worker %s", u)
		}
	}
}

func TestRandomStaysOnHealthyWorkers(t *testing.T) {
	ws := fleet(4)
	ws[0].SetHealthy(false)
	ws[2].SetHealthy(false)
	seen := map[string]int{}
	for _, u := range selectN(t, policy.NewRandom(nil), ws, 200) {
		seen[u]++
	}
	if seen[ws[0].URL()]+seen[ws[2].URL()] != 0 {
		t.Fatalf("random chose an unhealthy worker: %v", seen)
	}
	if seen[ws[1].URL()] == 0 || seen[ws[3].URL()] == 0 {
		t.Fatalf("random never chose one of the healthy workers in 200 draws: %v", seen)
	}
}

func TestPowerOfTwoPicksLessLoadedOfTheSample(t *testing.T) {
	tests := []struct {
		name  string
		loads []int
		draws []int // indices the random source returns
		want  int
	}{
		{"first sampled is lighter", []int{0, 5, 9}, []int{0, 0}, 0},
		{"second sampled is lighter", []int{7, 1, 9}, []int{0, 0}, 1},
		// draws (2, 0): j=0 < i=2 so the pair is workers 2 and 0.
		{"pair excludes the idle worker", []int{4, 0, 3}, []int{2, 0}, 2},
		{"ties go to the first sampled", []int{2, 2, 2}, []int{1, 1}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := fleet(len(tc.loads))
			for i, l := range tc.loads {
				defer busy(ws[i], l)()
			}
			d, err := policy.NewPowerOfTwo(draws(tc.draws...)).Select(context.Background(), &policy.Request{}, workers.Views(ws))
			if err != nil {
				t.Fatal(err)
			}
			if d.Worker != ws[tc.want] {
				t.Fatalf("chose %s, want %s (%s)", d.Worker.URL(), ws[tc.want].URL(), d.Why())
			}
		})
	}
}

func TestPowerOfTwoAvoidsLoadedWorkerWithTwoWorkers(t *testing.T) {
	ws := fleet(2)
	defer busy(ws[0], 10)()
	for _, u := range selectN(t, policy.NewPowerOfTwo(nil), ws, 50) {
		if u == ws[0].URL() {
			t.Fatal("power_of_two chose the loaded worker over an idle one")
		}
	}
}

func TestNoHealthyWorker(t *testing.T) {
	ws := fleet(2)
	for _, w := range ws {
		w.SetHealthy(false)
	}
	for _, name := range policy.Names() {
		p, err := policy.New(name, policy.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		for _, cands := range [][]*workers.Worker{nil, ws} {
			if _, err := p.Select(context.Background(), &policy.Request{}, workers.Views(cands)); !errors.Is(err, policy.ErrNoHealthyWorker) {
				t.Errorf("%s with %d candidates: err = %v, want ErrNoHealthyWorker", name, len(cands), err)
			}
		}
	}
}

func TestNewRejectsUnknownPolicy(t *testing.T) {
	if _, err := policy.New("fastest", policy.DefaultOptions()); err == nil {
		t.Fatal("New accepted an unknown policy name")
	}
	for _, name := range policy.Names() {
		p, err := policy.New(name, policy.DefaultOptions())
		if err != nil || p.Name() != name {
			t.Fatalf("New(%q) = %v, %v", name, p, err)
		}
	}
}

// must returns v, panicking on err: for building policies from options a
// test knows to be valid.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// opts returns DefaultOptions changed by set.
func opts(set func(o *policy.Options)) policy.Options {
	o := policy.DefaultOptions()
	set(&o)
	return o
}

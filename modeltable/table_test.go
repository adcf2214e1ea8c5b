package modeltable_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/modeltable"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/tokenize/textmodel"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// fleet registers a simulated engine for each model name given, in order,
// connected over loopback.
func fleet(t *testing.T, models ...string) *workers.Registry {
	t.Helper()
	reg := workers.NewRegistry()
	t.Cleanup(func() { reg.Close() })
	for _, m := range models {
		c := sim.DefaultConfig()
		c.Model, c.TimeScale, c.Logger = m, 0, slog.New(slog.DiscardHandler)
		s, err := sim.Start(c, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		w, err := workers.Join(context.Background(), reg, "grpc://"+s.Addr(), workers.ConnectOptions{}, slog.New(slog.DiscardHandler))
		if err != nil || !w.Connected() {
			t.Fatalf("join %s: %v", m, err)
		}
	}
	return reg
}

func regular() (modeltable.Spec, error) {
	return modeltable.Spec{Policies: map[workers.Role]policy.Policy{workers.RoleRegular: policy.NewRoundRobin()}, PageSize: 16}, nil
}

func urls(ws []*workers.Worker) []string {
	out := []string{}
	for _, w := range ws {
		out = append(out, w.URL())
	}
	return out
}

// The grouping is the one rule saying which model a worker serves: the one
// model has every worker whatever it reports, a named model the workers
// that report its name.
func TestGroupingDecidesWhichModelAWorkerServes(t *testing.T) {
	reg := fleet(t, "alpha", "beta", "alpha")
	all := reg.Snapshot()
	tests := []struct {
		grouping modeltable.Grouping
		model    string
		want     []string // the model's workers
	}{
		{modeltable.OneModel, "", urls(all)},
		{modeltable.ByName, "alpha", urls([]*workers.Worker{all[0], all[2]})},
		{modeltable.ByName, "beta", urls([]*workers.Worker{all[1]})},
		{modeltable.ByName, "gamma", []string{}},
	}
	for _, tt := range tests {
		table := modeltable.New(tt.grouping, func(*modeltable.Entry[int]) int { return 0 })
		if got := urls(table.Workers(reg, tt.model)); !slices.Equal(got, tt.want) {
			t.Errorf("%v %q: workers %v, want %v", tt.grouping, tt.model, got, tt.want)
		}
		e, added, err := table.Ensure(tt.model, regular)
		if err != nil || !added {
			t.Fatalf("%v %q: Ensure: added %v, %v", tt.grouping, tt.model, added, err)
		}
		if got := urls(e.Candidates(reg, workers.RoleRegular)); !slices.Equal(got, tt.want) {
			t.Errorf("%v %q: candidates %v, want %v", tt.grouping, tt.model, got, tt.want)
		}
		for _, w := range all {
			if serves, of := e.Serves(w), table.Of(w) == e; serves != of || serves != slices.Contains(tt.want, w.URL()) {
				t.Errorf("%v %q: worker %s (%s): Serves %v, Of %v", tt.grouping, tt.model, w.URL(), w.Info().Model, serves, of)
			}
		}
	}
}

// A router without --enable-igw serves one model, named "".
func TestOneModelTableRefusesANamedModel(t *testing.T) {
	table := modeltable.New(modeltable.OneModel, func(*modeltable.Entry[int]) int { return 0 })
	if _, _, err := table.Ensure("alpha", regular); err == nil {
		t.Fatal("a one-model table added a model named alpha")
	}
	if table.Len() != 0 {
		t.Fatalf("%d models after a refused Ensure", table.Len())
	}
}

// A model is added once, however many of its workers join; it serves token
// ids at once, and its tokenizer's arrival ends its loading and gives it a
// placer that sees the tokenizer.
func TestEnsureAddsOnceAndSetTextEndsLoading(t *testing.T) {
	built := 0
	placed := map[*textmodel.Model]int{} // placers built, by the text they saw
	table := modeltable.New(modeltable.ByName, func(e *modeltable.Entry[*textmodel.Model]) *textmodel.Model {
		placed[e.Text]++
		return e.Text
	})
	build := func() (modeltable.Spec, error) { built++; return regular() }
	first, added, err := table.Ensure("alpha", build)
	if err != nil || !added {
		t.Fatalf("first Ensure: added %v, %v", added, err)
	}
	again, added, err := table.Ensure("alpha", build)
	if err != nil || added || again != first || built != 1 {
		t.Fatalf("second Ensure: added %v, same entry %v, built %d times, %v", added, again == first, built, err)
	}
	if !first.TextLoading || first.Text != nil || first.Main() == nil || first.PageSize != 16 {
		t.Fatalf("new entry: loading %v, text %v, policy %v, page size %d", first.TextLoading, first.Text, first.Main(), first.PageSize)
	}
	select {
	case <-first.Ready():
		t.Fatal("ready before its tokenizer loaded")
	default:
	}
	if err := table.SetText("alpha", modeltable.Text{FromWorkers: true}); err != nil {
		t.Fatal(err)
	}
	<-first.Ready()
	e := table.Get("alpha")
	if e == first || e.TextLoading || !e.TextFromWorkers || e.Main() != first.Main() {
		t.Fatalf("after SetText: replaced %v, loading %v, from workers %v, same policy %v",
			e != first, e.TextLoading, e.TextFromWorkers, e.Main() == first.Main())
	}
	// A tokenizer that arrives later (from a worker that joined) is served
	// too; the ready channel stays closed, once.
	if err := table.SetText("alpha", modeltable.Text{FromWorkers: true}); err != nil {
		t.Fatal(err)
	}
	if placed[nil] != 3 {
		t.Fatalf("placers built %d times, want one per entry published (3)", placed[nil])
	}
	if err := table.SetText("beta", modeltable.Text{}); err == nil {
		t.Fatal("SetText of a model not served succeeded")
	}
}

package workers_test

// An engine's rank targets in the registry and its subscriptions: the KV
// events of each rank go to that rank's target, a removed rank hears no
// more, and an engine that joins late becomes its ranks.

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

func TestDPRankKVEvents(t *testing.T) {
	for _, p := range simProtocols {
		t.Run(p.name, func(t *testing.T) {
			e, addr, _ := startDPSim(t, p.name, 4)
			ws := connectAll(t, addr, true)
			reg := workers.NewRegistry()
			if err := reg.AddAll(ws...); err != nil {
				t.Fatal(err)
			}
			rec := newKVRecorder()
			subs, _ := runKVSubscriptions(t, reg, rec)
			testutil.Eventually(t, "every rank's subscriber", func() bool { return e.Stats().KVSubscribers == 4 })

			prompts := make([][]uint32, 4)
			for r, w := range ws {
				prompts[r] = testutil.Tokens(uint32(1000*(r+1)), 48)
				generate(t, w, fmt.Sprint("kv", r), prompts[r])
			}
			for r, w := range ws {
				testutil.Eventually(t, fmt.Sprintf("rank %d's pages on its target", r), func() bool { return hasPages(rec, w.URL(), prompts[r], 16) })
				for o := range ws {
					if o != r && hasPages(rec, ws[o].URL(), prompts[r], 16) {
						t.Errorf("rank %d's pages applied to %s", r, ws[o].URL())
					}
				}
				for _, b := range rec.applied(w.URL()) {
					if b.DPRank != r {
						t.Errorf("%s got a batch of rank %d", w.URL(), b.DPRank)
					}
				}
				// The mode may trail the pages: a batch reaches the handler
				// before the subscription counts the stream as working.
				testutil.Eventually(t, w.URL()+"'s mode to say events", func() bool { return mode(subs, w.URL()) == workers.KVModeEvents })
			}
			if st, ok := subs.Status(ws[0].Endpoint()); !ok || st.Batches < 4 {
				t.Errorf("the engine's subscription: %+v, %v", st, ok)
			}

			// Rank 1 leaves alone: the engine's stream goes on for the
			// others, and nothing more is applied to rank 1.
			if _, err := reg.Remove(ws[1].URL()); err != nil {
				t.Fatal(err)
			}
			before := len(rec.log(ws[1].URL()))
			generate(t, ws[1], "after-removal", testutil.Tokens(9000, 48))
			generate(t, ws[2], "still-there", testutil.Tokens(7000, 48))
			testutil.Eventually(t, "rank 2's new pages", func() bool { return hasPages(rec, ws[2].URL(), testutil.Tokens(7000, 48), 16) })
			if got := rec.log(ws[1].URL()); len(got) != before {
				t.Errorf("calls for the removed rank after its removal: %v", got[before:])
			}

			// Rank 0, under which the engine's subscription was filed,
			// leaves too: the same stream goes on for ranks 2 and 3 (a new
			// one would miss what happens in between, and say "exact" again).
			if _, err := reg.Remove(ws[0].URL()); err != nil {
				t.Fatal(err)
			}
			generate(t, ws[3], "after-rank-0", testutil.Tokens(8000, 48))
			testutil.Eventually(t, "rank 3's new pages", func() bool { return hasPages(rec, ws[3].URL(), testutil.Tokens(8000, 48), 16) })
			if n := slices.Index(rec.log(ws[3].URL()), "exact"); n < 0 || slices.Contains(rec.log(ws[3].URL())[n+1:], "exact") {
				t.Errorf("rank 3's handler calls: %v; want one stream, told exact once", rec.log(ws[3].URL()))
			}
			if e.Stats().KVSubscribers != 4 {
				t.Errorf("%d subscribers on the engine's ranks, want the one stream's 4", e.Stats().KVSubscribers)
			}
		})
	}
}

func TestRegistryRankTargets(t *testing.T) {
	_, addr, _ := startDPSim(t, sim.ProtocolSGLang, 3)
	ws := connectAll(t, addr, true)
	other := newTestWorker("grpc://127.0.0.1:1")
	reg := workers.NewRegistry()
	if err := reg.AddAll(other); err != nil {
		t.Fatal(err)
	}
	if err := reg.AddAll(ws[0], ws[0]); !errors.Is(err, workers.ErrWorkerExists) {
		t.Fatalf("the same name twice: %v", err)
	}
	gen := reg.Current().Generation
	if err := reg.AddAll(ws...); err != nil {
		t.Fatal(err)
	}
	if g := reg.Current().Generation; g != gen+1 {
		t.Errorf("adding 3 ranks took generations %d..%d, want one", gen, g)
	}
	url := ws[0].Endpoint()
	for _, tt := range []struct {
		addr string
		want []*workers.Worker
	}{
		{url, ws},
		{url + "@2", ws[2:]},
		{"127.0.0.1" + url[len("grpc://127.0.0.1"):] + "@1", ws[1:2]}, // host:port@rank
		{url + "@7", nil},
		{"grpc://127.0.0.1:1", []*workers.Worker{other}},
	} {
		if got := reg.Engine(tt.addr); !slices.Equal(got, tt.want) {
			t.Errorf("Engine(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
	if w, ok := reg.Get(url + "@1"); !ok || w != ws[1] {
		t.Errorf("Get(url@1) = %v, %v", w, ok)
	}
	if err := reg.RemoveAll(ws[0], other, newTestWorker("grpc://127.0.0.1:9")); !errors.Is(err, workers.ErrWorkerNotFound) {
		t.Fatalf("removing an unregistered worker with others: %v", err)
	}
	if len(reg.Snapshot()) != 4 {
		t.Fatal("a refused RemoveAll removed something")
	}
	if err := reg.RemoveAll(ws...); err != nil {
		t.Fatal(err)
	}
	if got := reg.Snapshot(); !slices.Equal(got, []*workers.Worker{other}) {
		t.Errorf("after removing the ranks: %v", got)
	}
}

// An engine that is not up when it is joined is a placeholder; when it
// comes up with two ranks, the placeholder becomes the two rank targets, in
// its place, in one change.
func TestJoinLateEngineBecomesItsRanks(t *testing.T) {
	addr := freeAddr(t)
	reg := workers.NewRegistry()
	first := newTestWorker("grpc://127.0.0.1:1")
	_ = reg.Add(first)
	ps, err := workers.JoinAll(t.Context(), reg, addr, workers.ConnectOptions{DPAware: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Connected() {
		t.Fatalf("JoinAll of a missing engine: %v", ps)
	}
	cfg := simConfig()
	cfg.DPSize = 2
	srv, err := sim.Start(cfg, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	url := "grpc://" + addr
	testutil.Eventually(t, "the ranks to replace the placeholder", func() bool { return len(reg.Engine(url)) == 2 })
	var names []string
	for _, w := range reg.Snapshot() {
		names = append(names, w.URL())
	}
	if want := []string{first.URL(), url + "@0", url + "@1"}; !slices.Equal(names, want) {
		t.Fatalf("registry %v, want %v", names, want)
	}
	for _, w := range reg.Engine(url) {
		_ = w.Close()
	}
}

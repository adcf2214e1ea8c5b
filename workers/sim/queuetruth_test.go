package sim

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"
)

// TestQueueShrunkCountsPrefixesEvictedWhileQueued: a request that waits in
// the engine's queue while the requests admitted before it evict its cached
// prefix is counted in Stats.QueueShrunk, the truth a router's prediction
// (made against the cache at the request's arrival) is judged by. One
// running slot, a cache of 8 pages of 16 tokens; the victim's 4-page prefix
// is cached when it queues behind the evictor.
func TestQueueShrunkCountsPrefixesEvictedWhileQueued(t *testing.T) {
	tests := []struct {
		name          string
		evictorTokens int // the prompt admitted ahead of the victim
		wantShrunk    uint64
	}{
		{"the request ahead fits beside the prefix", 32, 0},
		{"the request ahead takes the whole cache", 128, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig("sglang")
			cfg.MaxRunning, cfg.KVCapacityTokens, cfg.Faults.StallAfterTokens = 1, 128, 1
			srv, c := startSim(t, cfg)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			start := func(id string, ids []uint32) func() (msg, error) {
				t.Helper()
				recv, err := c.generate(ctx, genParams{id: id, prompt: ids, maxNew: u32(100), ignoreEOS: true})
				if err != nil {
					t.Fatal(err)
				}
				return recv
			}
			firstToken := func(id string, recv func() (msg, error)) {
				t.Helper()
				if m, err := recv(); err != nil || m.final {
					t.Fatalf("%s: first token %+v, %v", id, m, err)
				}
			}
			abort := func(id string) {
				t.Helper()
				if err := c.abort(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			prefix := prompt(100, 64)
			firstToken("warm", start("warm", prefix))
			abort("warm") // its 4 pages stay cached, unpinned
			firstToken("hold", start("hold", prompt(5000, 32)))
			evictor := start("evictor", prompt(9000, tt.evictorTokens))
			testutil.Eventually(t, "the evictor to queue", func() bool { return srv.Engine().Stats().Waiting == 1 })
			victim := start("victim", slices.Concat(prefix, prompt(7000, 16)))
			testutil.Eventually(t, "both to queue", func() bool { return srv.Engine().Stats().Waiting == 2 })
			abort("hold")
			firstToken("evictor", evictor)
			abort("evictor")
			firstToken("victim", victim)
			if st := srv.Engine().Stats(); st.QueueShrunk != tt.wantShrunk || st.QueueGrown != 0 {
				t.Fatalf("QueueShrunk %d QueueGrown %d, want %d and 0", st.QueueShrunk, st.QueueGrown, tt.wantShrunk)
			}
		})
	}
}

// TestEvictionClockDatesTheLackedPage: with debug logging, the engine can
// say how long before a request's arrival the first page it lacks left the
// cache (the admitted line's lacked_page_evicted_ms_before_arrival), and
// says -1 for a page it never evicted.
func TestEvictionClockDatesTheLackedPage(t *testing.T) {
	cfg := testConfig("sglang")
	cfg.KVCapacityTokens, cfg.Faults.StallAfterTokens = 64, 1
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, c := startSim(t, cfg)
	ctx := context.Background()
	run := func(id string, ids []uint32) {
		t.Helper()
		recv, err := c.generate(ctx, genParams{id: id, prompt: ids, maxNew: u32(100), ignoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		if m, err := recv(); err != nil || m.final {
			t.Fatalf("%s: first token %+v, %v", id, m, err)
		}
		if err := c.abort(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	evicted, other, never := prompt(100, 64), prompt(9000, 64), prompt(20000, 64)
	run("first", evicted)
	run("second", other) // the cache holds 4 pages: the first's leave
	e := srv.Engine()
	e.mu.Lock()
	defer e.mu.Unlock()
	if ago := e.evictedAgoLocked(evicted); ago < 0 {
		t.Fatalf("the evicted prompt's first page: evicted %v ago, want a date", ago)
	}
	if ago := e.evictedAgoLocked(never); ago != -1 {
		t.Fatalf("a prompt never cached: %v, want -1", ago)
	}
}

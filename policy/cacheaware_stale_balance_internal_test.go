package policy

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvgate/kvgate/workers"
)

// TestStaleSnapshotsDoNotHerd is a burst of selections that all read their
// snapshot (loads, queues, tree sizes) before any of them takes the tree
// lock, as on a starved machine where each waits for it: each must see the
// ones decided before it, so the burst spreads as it does when the
// selections run one after another. Without that, every one chose the
// worker the shared snapshot saw as least loaded, with the shortest
// queue, or holding the prompt. Both rules that keep a pick log are pinned.
func TestStaleSnapshotsDoNotHerd(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		name  string
		limit int // running-request limit each engine reports (0: none)
		warm  bool
		burst int
		want  [8]int // selections per worker
	}{
		{ModeThreshold, "8 engines of 256 slots holding the system prompt, 16 new conversations: 2 each",
			256, true, 16, [8]int{2, 2, 2, 2, 2, 2, 2, 2}},
		{ModeThreshold, "8 engines reporting no limit, 24 new conversations: 3 each",
			0, true, 24, [8]int{3, 3, 3, 3, 3, 3, 3, 3}},
		{ModeThreshold, "8 idle empty engines of 256 slots, 9 new conversations: the first takes two, then the start-up rule gives each other one",
			256, false, 9, [8]int{2, 1, 1, 1, 1, 1, 1, 1}},
		{ModeCost, "8 engines of 256 slots holding the system prompt, 16 new conversations: 2 each",
			256, true, 16, [8]int{2, 2, 2, 2, 2, 2, 2, 2}},
		{ModeCost, "8 engines reporting no limit, 24 new conversations: 3 each",
			0, true, 24, [8]int{3, 3, 3, 3, 3, 3, 3, 3}},
		{ModeWait, "8 engines of 256 slots holding the system prompt, 16 new conversations: 2 each",
			256, true, 16, [8]int{2, 2, 2, 2, 2, 2, 2, 2}},
		{ModeWait, "8 engines reporting no limit, 24 new conversations: 3 each",
			0, true, 24, [8]int{3, 3, 3, 3, 3, 3, 3, 3}},
		{ModeWait, "8 engines of 2 slots holding the system prompt, 16 new conversations: 2 each",
			2, true, 16, [8]int{2, 2, 2, 2, 2, 2, 2, 2}},
		{ModeWait, "8 idle empty engines, 9 new conversations: a queued copy of the system prompt costs more than a cold prefill, so each takes one, then the first a second",
			256, false, 9, [8]int{2, 1, 1, 1, 1, 1, 1, 1}},
	} {
		t.Run(tc.mode+"/"+tc.name, func(t *testing.T) {
			c, ws, system := systemPromptFleet(t, tc.mode, tc.limit, tc.warm)
			views := workers.Views(ws)
			snaps := make([]*snapshot, tc.burst)
			for i := range snaps {
				snaps[i] = c.snapshot(views)
			}
			got := map[int]int{}
			for i, s := range snaps {
				prompt := conversationPrompt(system, i)
				c.tree.MatchInsertAmong(prompt, s.x.roster, s.matched, func() int {
					c.decide(s, len(prompt))
					return s.chosen
				})
				got[s.chosen]++
			}
			for i, n := range tc.want {
				if got[i] != n {
					t.Fatalf("selections per worker %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// systemPromptFleet is cache_aware in mode over 8 engines reporting a
// running limit of limit (0: none) and a 1,024-token system prompt; warm:
// each engine already holds it.
func systemPromptFleet(t *testing.T, mode string, limit int, warm bool) (*CacheAware, []*workers.Worker, []uint32) {
	t.Helper()
	ws := make([]*workers.Worker, 8)
	for i := range ws {
		ws[i] = workers.NewWorker(fmt.Sprintf("grpc://127.0.0.1:%d", 9000+i), workers.ProtocolSGLang,
			workers.RoleRegular, workers.ModelInfo{MaxRunningRequests: limit}, nil, nil)
	}
	o := DefaultOptions()
	o.CacheAware.Mode = mode
	c, err := NewCacheAware(o)
	if err != nil {
		t.Fatal(err)
	}
	system := make([]uint32, 1024)
	for i := range system {
		system[i] = uint32(i + 1)
	}
	if warm {
		for _, w := range ws {
			if _, err := c.Select(context.Background(), &Request{InputIDs: system}, workers.Views([]*workers.Worker{w})); err != nil {
				t.Fatal(err)
			}
		}
	}
	return c, ws, system
}

// conversationPrompt is conversation i's first turn: the system prompt
// and a question of 128 tokens of its own.
func conversationPrompt(system []uint32, i int) []uint32 {
	prompt := append(append([]uint32(nil), system...), make([]uint32, 128)...)
	for k := range 128 {
		prompt[len(system)+k] = uint32(100_000 + 128*i + k)
	}
	return prompt
}

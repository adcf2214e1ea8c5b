package policy

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvgate/kvgate/workers"
)

// TestWaitModeStaleSnapshotsDoNotHerd is a burst of wait-mode selections
// that all read their snapshot (loads, queues) before any of them takes the
// tree lock, as on a starved machine where each waits for it: each must
// price the workers with the ones decided before it, so the burst spreads
// as it does when the selections run one after another. Without that,
// every one saw the same empty queues and chose the same worker.
func TestWaitModeStaleSnapshotsDoNotHerd(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int // running-request limit each engine reports (0: none)
		warm  bool
		burst int
		want  [8]int // selections per worker
	}{
		{name: "8 engines of 256 slots holding the system prompt, 16 new conversations: 2 each",
			limit: 256, warm: true, burst: 16, want: [8]int{2, 2, 2, 2, 2, 2, 2, 2}},
		{name: "8 engines reporting no limit, 24 new conversations: 3 each",
			warm: true, burst: 24, want: [8]int{3, 3, 3, 3, 3, 3, 3, 3}},
		{name: "8 engines of 2 slots holding the system prompt, 16 new conversations: 2 each",
			limit: 2, warm: true, burst: 16, want: [8]int{2, 2, 2, 2, 2, 2, 2, 2}},
		{name: "8 idle empty engines, 9 new conversations: a queued copy of the system prompt costs more than a cold prefill, so each takes one, then the first a second",
			limit: 256, burst: 9, want: [8]int{2, 1, 1, 1, 1, 1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ws, system := waitSystemPromptFleet(t, tc.limit, tc.warm)
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

// TestWaitModeRereadsQueuesPastThePickLog: a selection that waited for
// the tree lock behind more selections than the pick log holds cannot
// learn from it where they went; it reads every worker's load and queue
// afresh, so a queue that grew meanwhile is priced, not the snapshot's.
func TestWaitModeRereadsQueuesPastThePickLog(t *testing.T) {
	c, ws, system := waitSystemPromptFleet(t, 256, true)
	views := workers.Views(ws)
	s := c.snapshot(views)
	// Meanwhile worker 0 got a long prefill queue (2 s at 20,000 tokens a
	// second) and the log went round: the selections behind it went to
	// workers it no longer says.
	t.Cleanup(ws[0].Prefilling(40000))
	for range pickLogSize {
		s.x.log.add(1, 0)
	}
	prompt := conversationPrompt(system, 0)
	c.tree.MatchInsertAmong(prompt, s.x.roster, s.matched, func() int {
		c.decide(s, len(prompt))
		return s.chosen
	})
	if s.chosen == 0 {
		t.Fatalf("chose worker 0, whose queue grew to 40,000 tokens after the snapshot: %s", s.waitc.reason(*c.wait, s.ws, len(prompt)))
	}
	if q := s.waitLoads[0].queue; q != 40000 {
		t.Errorf("worker 0 priced with a queue of %d tokens, want 40000", q)
	}
}

// waitSystemPromptFleet is cache_aware's wait mode over 8 engines
// reporting a running limit of limit (0: none) and a 1,024-token system
// prompt; warm: each engine already holds it.
func waitSystemPromptFleet(t *testing.T, limit int, warm bool) (*CacheAware, []*workers.Worker, []uint32) {
	t.Helper()
	ws := make([]*workers.Worker, 8)
	for i := range ws {
		ws[i] = workers.NewWorker(fmt.Sprintf("grpc://127.0.0.1:%d", 9000+i), workers.ProtocolSGLang,
			workers.RoleRegular, workers.ModelInfo{MaxRunningRequests: limit}, nil, nil)
	}
	o := DefaultOptions()
	o.CacheAware.Mode = ModeWait
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

package policy

import (
	"testing"

	"github.com/kvgate/kvgate/workers"
)

// TestWaitModeRereadsQueuesPastThePickLog: a selection that waited for
// the tree lock behind more selections than the pick log holds cannot
// learn from it where they went; it reads every worker's load and queue
// afresh, so a queue that grew meanwhile is priced, not the snapshot's.
func TestWaitModeRereadsQueuesPastThePickLog(t *testing.T) {
	c, ws, system := systemPromptFleet(t, ModeWait, 256, true)
	views := workers.Views(ws)
	s := c.snapshot(views)
	// Meanwhile worker 0 got a long prefill queue (2 s at 20,000 tokens a
	// second) and the log went round: the selections behind it went to
	// workers it no longer says.
	t.Cleanup(ws[0].Prefilling(40000).End)
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

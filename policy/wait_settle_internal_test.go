package policy

import (
	"context"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/workers"
)

// TestWaitDecisionLetsGoOfTheCandidates: a decision lives as long as its
// request (the in-flight set and the caller hold it), so once the wait
// mode has chosen, the decision keeps what its reason names and none of
// the candidates' readings: among 1,000 workers those were about 290 KB
// a request in flight. The reason reads as the dry run's of the same
// state.
func TestWaitDecisionLetsGoOfTheCandidates(t *testing.T) {
	c, ws, system := systemPromptFleet(t, ModeWait, 256, true)
	views := workers.Views(ws)
	prompt := conversationPrompt(system, 0)
	dry, err := c.Select(context.Background(), &Request{InputIDs: prompt, DryRun: true}, views)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 { // the second and third reuse the first's scratch
		d, err := c.Select(context.Background(), &Request{InputIDs: prompt}, views)
		if err != nil {
			t.Fatal(err)
		}
		s := d.why.(*snapshot)
		if s.waitLoads != nil || s.waitScratch != nil || s.waitc.cands != nil || s.waitc.loads != nil || s.loads != nil || s.sizes != nil {
			t.Fatalf("round %d: the decision keeps the candidates' readings (%d), choice (%d), loads (%d) and sizes (%d)",
				round, len(s.waitLoads), len(s.waitc.cands), len(s.loads), len(s.sizes))
		}
		if round == 0 && (d.Why() != dry.Why() || !strings.Contains(d.Why(), "expects ")) {
			t.Errorf("reason %q, the dry run's %q", d.Why(), dry.Why())
		}
		c.Observe(&Request{InputIDs: prompt}, d, Outcome{})
	}
}

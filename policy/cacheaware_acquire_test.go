package policy_test

import (
	"context"
	"testing"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestCacheAwareCountsDecisionsUntilAcquired is the window between a
// selection and its worker's Acquire, which the router crosses after
// Select returns and the worker's circuit breaker lets the request in. A
// selection in that window saw the first one neither in the loads nor
// among the decisions made since its snapshot, and went to the same
// worker: on a starved machine a burst herded through it. A caller that
// promises to say when the worker's load counts the request
// (Request.Acquires, Decision.Acquired) has it counted until then, once.
//
// Eight idle workers hold a shared system prompt; a first request of it
// is decided, and then, per row, acquired or abandoned or neither; then a
// second request of it is decided.
func TestCacheAwareCountsDecisionsUntilAcquired(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		acquires bool // the first request's Request.Acquires
		dryRun   bool
		then     string // "": nothing yet; "acquired": Acquire, then Acquired; "abandoned": Acquired alone
		// othersBusy puts a request in flight on every worker but w0
		// before the second request; pendingOnW7 decides one more for
		// w7 (its own prompt) and leaves it pending.
		othersBusy, pendingOnW7 bool
		want                    string // the second request's worker
	}{
		{name: "decided, not yet acquired: it counts in w0's load, the second goes elsewhere",
			acquires: true, want: "w1"},
		{name: "acquired: it counts once, in w0's own load, so w0 ties with the others",
			acquires: true, then: "acquired", othersBusy: true, want: "w0"},
		{name: "acquired, while another decision is pending on w7: it still counts once",
			acquires: true, then: "acquired", othersBusy: true, pendingOnW7: true, want: "w0"},
		{name: "abandoned (its breaker refused it): it counts no more",
			acquires: true, then: "abandoned", want: "w0"},
		{name: "a caller that does not promise Acquired: not counted",
			want: "w0"},
		{name: "a dry run (Explain): not counted",
			acquires: true, dryRun: true, want: "w0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := fleet(8)
			names := map[*workers.Worker]string{}
			for i, w := range ws {
				names[w] = "w" + string(rune('0'+i))
			}
			o := policy.DefaultOptions()
			o.CacheAware.Mode = policy.ModeThreshold
			p, err := policy.NewCacheAware(o)
			if err != nil {
				t.Fatal(err)
			}
			system, own := caTokens(1, 1024), caTokens(5_000, 1024)
			for _, w := range ws {
				if _, err := p.Select(ctx, &policy.Request{InputIDs: system}, workers.Views([]*workers.Worker{w})); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := p.Select(ctx, &policy.Request{InputIDs: own}, workers.Views(ws[7:])); err != nil {
				t.Fatal(err)
			}
			views := workers.Views(ws)
			first, got := decideName(t, p, &policy.Request{InputIDs: system, Acquires: tc.acquires, DryRun: tc.dryRun}, views, names)
			if got != "w0" {
				t.Fatalf("the first request went to %s, want w0", got)
			}
			switch tc.then {
			case "acquired":
				defer first.Worker.Acquire()()
				first.Acquired()
				first.Acquired() // a second call changes nothing
			case "abandoned":
				first.Acquired()
			}
			if tc.othersBusy {
				for _, w := range ws[1:] {
					defer busy(w, 1)()
				}
			}
			if tc.pendingOnW7 {
				if _, got := decideName(t, p, &policy.Request{InputIDs: own, Acquires: true}, views, names); got != "w7" {
					t.Fatalf("w7's own prompt went to %s, want w7", got)
				}
			}
			if second, got := decideName(t, p, &policy.Request{InputIDs: system, Acquires: true}, views, names); got != tc.want {
				t.Fatalf("the second request went to %s (%s), want %s", got, second.Why(), tc.want)
			}
		})
	}
}

// TestScoredModesCountDecisionsUntilAcquired is the same window in the
// cost and wait modes, which price a worker by the prefill queued on it
// (PendingPrefill) and its load: a decision pending there counts in both,
// its prompt in the queue and itself in the load, until the caller's
// Acquire and Prefilling do (Decision.Acquired), once.
//
// Three idle workers, w1 and w2 holding prompts of their own, twice as long
// as the first and second; a first cold prompt is decided (to w0, whose
// tree is the smallest), then, per row, acquired or abandoned or neither;
// then a second cold prompt is decided. Where w0 ties with the others, its
// tree is still the smallest, so the tie goes to w0.
func TestScoredModesCountDecisionsUntilAcquired(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []string{policy.ModeCost, policy.ModeWait} {
		for _, tc := range []struct {
			name     string
			acquires bool
			dryRun   bool
			then     string // "": nothing yet; "acquired": Acquire and Prefilling, then Acquired; "abandoned": Acquired alone
			// othersBusy gives w1 and w2 what the first request gives w0
			// once acquired: a request in flight and its prompt queued;
			// pendingOnW2 then decides w2's own prompt for w2 (it queues
			// nothing there) and leaves it pending.
			othersBusy, pendingOnW2 bool
			want                    string
		}{
			{name: "decided, not yet acquired: its prompt queues on w0, the second goes elsewhere",
				acquires: true, want: "w1"},
			{name: "acquired: it counts once, in w0's own load and queue, so w0 ties with the others",
				acquires: true, then: "acquired", othersBusy: true, want: "w0"},
			{name: "acquired, while another decision is pending on w2: it still counts once",
				acquires: true, then: "acquired", othersBusy: true, pendingOnW2: true, want: "w0"},
			{name: "abandoned (its breaker refused it): it counts no more",
				acquires: true, then: "abandoned", want: "w0"},
			{name: "a caller that does not promise Acquired: not counted",
				want: "w0"},
			{name: "a dry run (Explain): not counted",
				acquires: true, dryRun: true, want: "w0"},
		} {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				ws := fleet(3)
				names := map[*workers.Worker]string{ws[0]: "w0", ws[1]: "w1", ws[2]: "w2"}
				p := newCA(t, func(o *policy.Options) { o.CacheAware.Mode = mode })
				views := workers.Views(ws)
				firstPrompt, secondPrompt, own := caTokens(1, 1024), caTokens(2, 1024), caTokens(3, 2048)
				if _, err := p.Select(ctx, &policy.Request{InputIDs: own}, workers.Views(ws[2:])); err != nil {
					t.Fatal(err)
				}
				if _, err := p.Select(ctx, &policy.Request{InputIDs: caTokens(4, 2048)}, workers.Views(ws[1:2])); err != nil {
					t.Fatal(err)
				}
				first, got := decideName(t, p, &policy.Request{InputIDs: firstPrompt, Acquires: tc.acquires, DryRun: tc.dryRun}, views, names)
				if got != "w0" {
					t.Fatalf("the first request went to %s, want w0", got)
				}
				switch tc.then {
				case "acquired":
					defer first.Worker.Acquire()()
					defer first.Worker.Prefilling(len(firstPrompt) - first.PredictedCachedTokens).End()
					first.Acquired()
					first.Acquired() // a second call changes nothing
				case "abandoned":
					first.Acquired()
				}
				if tc.othersBusy {
					for _, w := range ws[1:] {
						defer busy(w, 1)()
						defer w.Prefilling(len(firstPrompt)).End()
					}
				}
				if tc.pendingOnW2 {
					if _, got := decideName(t, p, &policy.Request{InputIDs: own, Acquires: true}, views, names); got != "w2" {
						t.Fatalf("w2's own prompt went to %s, want w2", got)
					}
				}
				if second, got := decideName(t, p, &policy.Request{InputIDs: secondPrompt, Acquires: true}, views, names); got != tc.want {
					t.Fatalf("the second request went to %s (%s), want %s", got, second.Why(), tc.want)
				}
			})
		}
	}
}

// decideName decides req among views and names the worker it chose.
func decideName(t *testing.T, p *policy.CacheAware, req *policy.Request, views []workers.View, names map[*workers.Worker]string) (policy.Decision, string) {
	t.Helper()
	d, err := p.Select(context.Background(), req, views)
	if err != nil {
		t.Fatal(err)
	}
	return d, names[d.Worker]
}

package policy

import (
	"context"
	"slices"
	"testing"

	"github.com/kvgate/kvgate/workers"
)

// TestPickLogSince is what a selection reads of the log: the selections
// logged since its snapshot, in order, while the log still holds them all.
func TestPickLogSince(t *testing.T) {
	for _, tc := range []struct {
		name        string
		before, add int // logged before the snapshot, and since
		wantOK      bool
	}{
		{name: "none since", before: 5, add: 0, wantOK: true},
		{name: "three since", before: 5, add: 3, wantOK: true},
		{name: "one less than the log's size", before: 5, add: pickLogSize - 1, wantOK: true},
		{name: "the log's size: the oldest may be overwritten", before: 5, add: pickLogSize, wantOK: false},
		{name: "many more", before: 0, add: 3 * pickLogSize, wantOK: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l pickLog
			for k := range tc.before {
				l.add(k%7, 1_000+k)
			}
			from := l.now()
			var want [][2]int
			for k := range tc.add {
				l.add(k%11, 2*k)
				want = append(want, [2]int{k % 11, 2 * k})
			}
			var got [][2]int
			ok := l.since(from, func(i, tokens int) { got = append(got, [2]int{i, tokens}) })
			if ok != tc.wantOK {
				t.Fatalf("since reported %v, want %v", ok, tc.wantOK)
			}
			if ok && !slices.Equal(got, want) {
				t.Fatalf("since saw %d selections %v..., want %d %v...", len(got), head(got), len(want), head(want))
			}
		})
	}
}

func head(p [][2]int) [][2]int { return p[:min(len(p), 4)] }

// TestCacheAwareStaleSnapshotPastTheLog is a selection that waited for the
// tree lock behind more selections than the log holds, each of which its
// worker then took (Acquire, as the router does): it reads the loads
// afresh and goes to the least loaded, where the snapshot's loads (all
// idle) would have sent it to the first worker, which by then carries
// one request more than every other.
func TestCacheAwareStaleSnapshotPastTheLog(t *testing.T) {
	c, ws, system := systemPromptFleet(t, ModeThreshold, 0, true)
	views := workers.Views(ws)
	stale := c.snapshot(views)
	for range pickLogSize + 1 { // 8×128+1: the first worker carries one more
		d, err := c.Select(context.Background(), &Request{InputIDs: system}, views)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Worker.Acquire()()
	}
	c.tree.MatchInsertAmong(system, stale.x.roster, stale.matched, func() int {
		c.decide(stale, len(system))
		return stale.chosen
	})
	loads := make([]int, len(ws))
	for i, w := range ws {
		loads[i] = w.Load()
	}
	if stale.chosen != 1 {
		t.Fatalf("the stale selection chose worker %d (%s), want 1, the earliest least loaded of %v", stale.chosen, stale.branch, loads)
	}
}

package policy

import (
	"testing"
	"time"
)

// TestInFlightSweepsAbandonedEntries: a placement whose outcome never comes
// (abandoned before its dispatch) must not stay counted for ever: once a
// worker's entries reach the sweep size, those older than inFlightMaxAge
// go and younger ones stay.
func TestInFlightSweepsAbandonedEntries(t *testing.T) {
	f := newInFlight[*snapshot]()
	t0 := time.Unix(1_000_000, 0)
	prompt := []uint32{1, 2, 3}
	for range inFlightSweepMin - 1 {
		f.add("w", &snapshot{}, prompt, t0)
	}
	live := &snapshot{}
	f.add("w", live, prompt, t0.Add(inFlightMaxAge/2))
	if n := len(f.per["w"].reqs); n != inFlightSweepMin {
		t.Fatalf("%d entries below the sweep size, want %d", n, inFlightSweepMin)
	}
	f.add("w", &snapshot{}, prompt, t0.Add(inFlightMaxAge+time.Second))
	if n := len(f.per["w"].reqs); n != 2 {
		t.Fatalf("%d entries after sweeping the abandoned ones, want 2 (the live one and the new one)", n)
	}
	if _, ok := f.per["w"].reqs[live]; !ok {
		t.Fatal("the sweep dropped an entry younger than inFlightMaxAge")
	}
	f.done("w", live)
	f.forget("w")
	if _, ok := f.per["w"]; ok {
		t.Fatal("forget kept the worker's entries")
	}
}

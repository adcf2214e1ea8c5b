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
		f.add("w", &snapshot{}, prompt, 3, t0)
	}
	live := &snapshot{}
	f.add("w", live, prompt, 3, t0.Add(inFlightMaxAge/2))
	if n := len(f.per["w"].reqs); n != inFlightSweepMin {
		t.Fatalf("%d entries below the sweep size, want %d", n, inFlightSweepMin)
	}
	f.add("w", &snapshot{}, prompt, 3, t0.Add(inFlightMaxAge+time.Second))
	if n := len(f.per["w"].reqs); n != 2 {
		t.Fatalf("%d entries after sweeping the abandoned ones, want 2 (the live one and the new one)", n)
	}
	if _, ok := f.per["w"].reqs[live]; !ok {
		t.Fatal("the sweep dropped an entry younger than inFlightMaxAge")
	}
	f.done("w", live, true, nil)
	f.forget("w")
	if _, ok := f.per["w"]; ok {
		t.Fatal("forget kept the worker's entries")
	}
}

// TestInFlightKeepsRecentEndsBounded: the prompts of ended requests a
// worker keeps (for atLimitEvicts) are the latest recentEnds, and fewer
// when their tokens pass recentEndTokens, but never none; an abandoned
// request leaves no end and takes its charge back; a failed one leaves no
// end but keeps its charge (the engine may have run part of it).
func TestInFlightKeepsRecentEndsBounded(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	tests := []struct {
		name                 string
		ends, promptLen      int
		wantEnds, wantTokens int
	}{
		{"few short prompts: all kept", 10, 100, 10, 1_000},
		{"many short prompts: the latest recentEnds", recentEnds + 30, 100, recentEnds, recentEnds * 100},
		{"long prompts: as many as the token bound holds", 10, recentEndTokens / 4, 4, recentEndTokens},
		{"one prompt over the token bound: kept alone", 3, recentEndTokens + 1, 1, recentEndTokens + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newInFlight[*snapshot]()
			for i := range tt.ends {
				s := &snapshot{}
				prompt := make([]uint32, tt.promptLen)
				prompt[0] = uint32(i)
				f.add("w", s, prompt, 1, t0)
				f.done("w", s, true, nil)
			}
			fl := f.per["w"]
			if len(fl.ends) != tt.wantEnds || fl.endToks != tt.wantTokens {
				t.Fatalf("kept %d ends of %d tokens, want %d of %d", len(fl.ends), fl.endToks, tt.wantEnds, tt.wantTokens)
			}
			if last := fl.ends[len(fl.ends)-1]; last.prompt[0] != uint32(tt.ends-1) || last.charged != int64(tt.ends) {
				t.Fatalf("the last end kept is request %d at %d charged, want the latest, %d at %d", last.prompt[0], last.charged, tt.ends-1, tt.ends)
			}
		})
	}
	t.Run("abandoned and failed requests", func(t *testing.T) {
		f := newInFlight[*snapshot]()
		gone, failed := &snapshot{}, &snapshot{}
		f.add("w", gone, []uint32{1}, 50, t0)
		f.add("w", failed, []uint32{2}, 70, t0)
		f.abandon("w", gone)
		f.done("w", failed, false, []uint32{7, 8})
		fl := f.per["w"]
		if len(fl.ends) != 0 || fl.charged != 70 {
			t.Fatalf("%d ends and %d charged, want none and 70 (the failed request's charge)", len(fl.ends), fl.charged)
		}
	})
}

// TestEndedHoldsPromptThenReply: an ended request holds, for the rule of
// atLimitEvicts, what its engine cached: its prompt followed by its reply,
// so the next turn of a conversation, whose match runs into the last
// answer, finds the turn before it. Its reply counts as KV the engine added.
func TestEndedHoldsPromptThenReply(t *testing.T) {
	e := ended{prompt: []uint32{1, 2, 3, 4}, reply: []uint32{5, 6}}
	tests := []struct {
		name     string
		ids      []uint32
		from, to int
		want     bool
	}{
		{"within the prompt", []uint32{1, 2, 3, 9}, 0, 3, true},
		{"into the reply", []uint32{1, 2, 3, 4, 5, 6, 7}, 0, 6, true},
		{"only the reply's part", []uint32{0, 0, 0, 0, 5, 6}, 4, 6, true},
		{"across the two, from inside the prompt", []uint32{0, 0, 3, 4, 5}, 2, 5, true},
		{"past the reply", []uint32{1, 2, 3, 4, 5, 6, 7}, 0, 7, false},
		{"a prompt token differs", []uint32{1, 9, 3, 4, 5}, 0, 5, false},
		{"a reply token differs", []uint32{1, 2, 3, 4, 9}, 0, 5, false},
		{"nothing asked", []uint32{9}, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := e.holds(tt.ids, tt.from, tt.to); got != tt.want {
				t.Fatalf("holds(%v, %d, %d) = %v, want %v", tt.ids, tt.from, tt.to, got, tt.want)
			}
		})
	}
	f := newInFlight[*snapshot]()
	s := &snapshot{}
	f.add("w", s, e.prompt, 4, time.Unix(1_000_000, 0))
	f.done("w", s, true, e.reply)
	if fl := f.per["w"]; fl.charged != 6 || fl.endToks != 6 || fl.ends[0].charged != 6 {
		t.Fatalf("charged %d, kept %d tokens, the end at %d; want 6 each: the prefill and the reply", fl.charged, fl.endToks, fl.ends[0].charged)
	}
}

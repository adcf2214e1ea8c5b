package cache

import "testing"

// EncodeDeferredLookup reports, per call, what the counters count in total:
// a miss, then an L1 hit of the shared turn, then an L0 hit of a committed
// text.
func TestEncodeDeferredLookupSaysHowTheCachesServed(t *testing.T) {
	tok := &fakeTok{added: chatmlTokens()[:2], bos: true}
	c := New(tok, tok.added, DefaultConfig())
	turn1 := "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
	turn2 := turn1 + "<|im_start|>assistant\nhello<|im_end|>\n"
	steps := []struct {
		name   string
		text   string
		commit bool
		want   Lookup
	}{
		{"first sight: a miss", turn1, true, Lookup{}},
		{"the next turn: its prefix from L1", turn2, false, Lookup{L1HitBytes: len(turn1) - 1}},
		{"the same text again: L0", turn1, false, Lookup{L0Hit: true}},
		{"an uncommitted text stays uncached", turn2, false, Lookup{L1HitBytes: len(turn1) - 1}},
	}
	for _, s := range steps {
		_, commit, got, err := c.EncodeDeferredLookup(s.text, true)
		if err != nil {
			t.Fatal(err)
		}
		if got != s.want {
			t.Errorf("%s: lookup %+v, want %+v", s.name, got, s.want)
		}
		if s.commit {
			commit()
		}
	}
}

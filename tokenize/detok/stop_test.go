package detok

import (
	"strings"
	"testing"
)

// pieceDec is a toy decoder: id i decodes to pieces[i] (ids ≥ 1000 are the
// raw byte id-1000), with lossy UTF-8 repair over the whole window, as a
// byte-level decoder does. Ids listed in special are special tokens.
type pieceDec struct {
	pieces  []string
	special map[uint32]bool
}

func (d *pieceDec) Decode(ids []uint32, skip bool) (string, error) {
	var b []byte
	for _, id := range ids {
		if skip && d.special[id] {
			continue
		}
		if id >= 1000 {
			b = append(b, byte(id-1000))
			continue
		}
		b = append(b, d.pieces[id]...)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), nil
}

func (d *pieceDec) IsSpecial(id uint32) bool { return d.special[id] }

// tokensOf maps each piece to an id of a fresh pieceDec.
func tokensOf(pieces ...string) (*pieceDec, []uint32) {
	d := &pieceDec{special: map[uint32]bool{}}
	ids := make([]uint32, len(pieces))
	for i, p := range pieces {
		d.pieces = append(d.pieces, p)
		ids[i] = uint32(i)
		if strings.HasPrefix(p, "<|") {
			d.special[uint32(i)] = true
		}
	}
	return d, ids
}

type run struct {
	deltas  []string
	out     string
	stopped bool
	str     string
	tok     int64 // -1 if none
}

// pushEach pushes ids one at a time (or all at once) and finishes.
func pushEach(t *testing.T, d Decoder, ids []uint32, opts Options, oneByOne bool) run {
	t.Helper()
	s := NewStream(d, opts)
	var r run
	r.tok = -1
	chunks := [][]uint32{ids}
	if oneByOne {
		chunks = nil
		for i := range ids {
			chunks = append(chunks, ids[i:i+1])
		}
	}
	for _, c := range chunks {
		delta, stopped, err := s.Push(c)
		if err != nil {
			t.Fatal(err)
		}
		r.deltas = append(r.deltas, delta)
		r.out += delta
		if stopped {
			r.stopped = true
			break
		}
	}
	f := s.Finish()
	r.deltas = append(r.deltas, f)
	r.out += f
	r.str, _ = s.Matched()
	if _, tok := s.Matched(); tok != nil {
		r.tok = int64(*tok)
	}
	return r
}

func TestStopStrings(t *testing.T) {
	tests := []struct {
		name    string
		pieces  []string
		opts    Options
		want    string
		matched string
		tok     int64
	}{
		{"no stops", []string{"Hello", " world"}, Options{}, "Hello world", "", -1},
		{"split over three tokens", []string{"The", " answer", " is", " 4", "2", ".", "\n", "Obs", "erv", "ation", ": more"},
			Options{StopStrings: []string{"Observation:"}}, "The answer is 42.\n", "Observation:", -1},
		{"no stop trim", []string{"a", "ST", "O", "P", "b"}, Options{StopStrings: []string{"STOP"}, NoStopTrim: true}, "aSTOP", "STOP", -1},
		{"stop at very start", []string{"##", "#rest"}, Options{StopStrings: []string{"###"}}, "", "###", -1},
		{"stop inside one token", []string{"abcSTOPdef"}, Options{StopStrings: []string{"STOP"}}, "abc", "STOP", -1},
		{"overlapping candidates: first completed wins", []string{"x", "ab", "cd"}, Options{StopStrings: []string{"abcd", "bc"}}, "xa", "bc", -1},
		{"same end: longer wins", []string{"x", "abc"}, Options{StopStrings: []string{"bc", "abc"}}, "x", "abc", -1},
		{"self-overlapping prefix", []string{"aa", "ab", "x"}, Options{StopStrings: []string{"aab"}}, "a", "aab", -1},
		{"partial match released", []string{"Obs", "cure", " end"}, Options{StopStrings: []string{"Observation"}}, "Obscure end", "", -1},
		{"partial match released at finish", []string{"done", " Obs"}, Options{StopStrings: []string{"Observation"}}, "done Obs", "", -1},
		{"multibyte stop", []string{"日", "本", "語"}, Options{StopStrings: []string{"本語"}}, "日", "本語", -1},
		{"stop token", []string{"Hi", "<|end|>", "ignored"}, Options{StopTokenIDs: []uint32{1}}, "Hi", "", 1},
		{"stop token kept with no_stop_trim", []string{"Hi", "<|end|>", "x"}, Options{StopTokenIDs: []uint32{1}, NoStopTrim: true}, "Hi<|end|>", "", 1},
		{"special stop token skipped even with no_stop_trim", []string{"Hi", "<|end|>"},
			Options{StopTokenIDs: []uint32{1}, NoStopTrim: true, SkipSpecialTokens: true}, "Hi", "", 1},
		{"non-special stop token trimmed", []string{"Hi", "END", "x"}, Options{StopTokenIDs: []uint32{1}}, "Hi", "", 1},
		{"held text flushed at stop token", []string{"Hi ", "Obs", "<|eot|>"}, Options{StopStrings: []string{"Observation"}, StopTokenIDs: []uint32{2}}, "Hi Obs", "", 2},
		{"stop string completed by stop token text", []string{"a", "<|", "<|x|>"},
			Options{StopStrings: []string{"<|<|"}, StopTokenIDs: []uint32{2}, NoStopTrim: true}, "a<|<|", "<|<|", -1},
		{"skip special tokens", []string{"<|start|>", "Hi", "<|mid|>", " there"}, Options{SkipSpecialTokens: true}, "Hi there", "", -1},
		{"stop string spanning a skipped special", []string{"ST", "<|x|>", "OP", "!"}, Options{SkipSpecialTokens: true, StopStrings: []string{"STOP"}}, "", "STOP", -1},
	}
	for _, tt := range tests {
		for _, oneByOne := range []bool{true, false} {
			name := tt.name
			if !oneByOne {
				name += "/batch"
			}
			t.Run(name, func(t *testing.T) {
				d, ids := tokensOf(tt.pieces...)
				r := pushEach(t, d, ids, tt.opts, oneByOne)
				if r.out != tt.want || r.str != tt.matched || r.tok != tt.tok {
					t.Fatalf("got %q (stop %q, token %d), want %q (stop %q, token %d); deltas %q",
						r.out, r.str, r.tok, tt.want, tt.matched, tt.tok, r.deltas)
				}
				if stopped := tt.matched != "" || tt.tok >= 0; r.stopped != stopped {
					t.Errorf("stopped = %v, want %v", r.stopped, stopped)
				}
			})
		}
	}
}

func TestHeldBackUntilItCannotMatch(t *testing.T) {
	d, ids := tokensOf("Hello ", "Ob", "se", "rved", " it")
	s := NewStream(d, Options{StopStrings: []string{"Observation"}})
	want := []string{"Hello ", "", "", "Observed", " it"}
	for i, id := range ids {
		delta, stopped, err := s.Push([]uint32{id})
		if err != nil || stopped {
			t.Fatal(err, stopped)
		}
		if delta != want[i] {
			t.Errorf("after token %d: delta %q, want %q", i, delta, want[i])
		}
	}
}

func TestNoSplitCharacters(t *testing.T) {
	// 日 = E6 97 A5 and 🙂 = F0 9F 99 82, one byte per token.
	d := &pieceDec{pieces: []string{"a"}, special: map[uint32]bool{}}
	ids := []uint32{0, 1000 + 0xE6, 1000 + 0x97, 1000 + 0xA5, 1000 + 0xF0, 1000 + 0x9F, 1000 + 0x99, 1000 + 0x82, 0}
	s := NewStream(d, Options{})
	var got []string
	for _, id := range ids {
		delta, _, _ := s.Push([]uint32{id})
		got = append(got, delta)
	}
	want := []string{"a", "", "", "日", "", "", "", "🙂", "a"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("deltas %q, want %q", got, want)
	}
	if f := s.Finish(); f != "" {
		t.Errorf("Finish = %q", f)
	}
}

func TestIncompleteCharacterAtFinish(t *testing.T) {
	d := &pieceDec{pieces: []string{"a"}, special: map[uint32]bool{}}
	ids := []uint32{0, 1000 + 0xE6, 1000 + 0x97}
	r := pushEach(t, d, ids, Options{}, true)
	want, _ := d.Decode(ids, false)
	if r.out != want {
		t.Errorf("got %q, want %q", r.out, want)
	}
}

func TestGarbageBytesDoNotHoldForever(t *testing.T) {
	d := &pieceDec{pieces: []string{"a"}, special: map[uint32]bool{}}
	s := NewStream(d, Options{})
	var out string
	for i := range 1000 {
		delta, _, _ := s.Push([]uint32{1000 + 0x80}) // a lone continuation byte, forever
		out += delta
		if pending := len(s.ids) - s.readOffset; pending > maxPending+1 {
			t.Fatalf("after %d ids, %d are pending", i+1, pending)
		}
	}
	out += s.Finish()
	if !strings.HasPrefix(out, "\uFFFD") || strings.ContainsFunc(out, func(r rune) bool { return r != '\uFFFD' }) {
		t.Errorf("unexpected output %q", out)
	}
}

package detok

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzStopStrings: for any token sequence (pieces of text cut at NUL bytes)
// and any stop strings (cut at NUL bytes too), pushed one token at a time
// or all at once, the emitted text is exactly the generated text up to the
// first stop-string occurrence (the one that ends first, trimmed unless
// NoStopTrim), or all of it when no stop string occurs: nothing withheld is
// lost or repeated, and a match is reported exactly when a stop string
// occurs.
func FuzzStopStrings(f *testing.F) {
	f.Add("Hello\x00 wor\x00ld\x00!", "world", false, true)
	f.Add("a\x00b\x00a\x00b\x00c", "abc\x00ba", false, false)
	f.Add("xx\x00STO\x00P\x00yy", "STOP\x00TO", true, true)
	f.Add("日本\x00語\x00🙂", "本語\x00🙂", false, true)
	f.Add("aaaa", "aa\x00a", false, true)
	f.Add("no stop here", "", false, false)
	f.Fuzz(func(t *testing.T, tokens, stops string, noTrim, oneByOne bool) {
		tokens, stops = strings.ToValidUTF8(tokens, ""), strings.ToValidUTF8(stops, "")
		pieces := strings.Split(tokens, "\x00")
		if len(pieces) >= 1000 {
			return // the toy decoder reads ids from 1000 up as raw bytes
		}
		var stopList []string
		for _, s := range strings.Split(stops, "\x00") {
			if s != "" {
				stopList = append(stopList, s)
			}
		}
		d, ids := tokensOf(pieces...)
		d.special = nil // every piece is text here
		r := pushEach(t, d, ids, Options{StopStrings: stopList, NoStopTrim: noTrim}, oneByOne)

		full := strings.Join(pieces, "")
		end := -1 // where the first occurrence of any stop string ends
		for _, s := range stopList {
			if i := strings.Index(full, s); i >= 0 && (end < 0 || i+len(s) < end) {
				end = i + len(s)
			}
		}
		if end < 0 {
			if r.stopped || r.str != "" || r.out != full {
				t.Fatalf("no stop string in %q, yet stopped=%v (%q) and emitted %q", full, r.stopped, r.str, r.out)
			}
			return
		}
		if !r.stopped || r.str == "" || !strings.HasSuffix(full[:end], r.str) {
			t.Fatalf("%q stops at %d, yet stopped=%v with %q", full, end, r.stopped, r.str)
		}
		want := full[:end-len(r.str)]
		if noTrim {
			want = full[:end]
		}
		if r.out != want {
			t.Fatalf("emitted %q, want %q (stop %q)", r.out, want, r.str)
		}
		if !utf8.ValidString(r.out) {
			t.Fatalf("emitted invalid UTF-8 %q", r.out)
		}
	})
}

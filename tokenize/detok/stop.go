package detok

import "strings"

// feed takes newly decoded text and returns what may be emitted: all of it
// without stop strings; otherwise the text before the first completed stop
// string (which ends the stream), or the text up to the earliest position
// where a stop string could still start. With final set nothing more will
// come, so nothing is held back.
func (s *Detokenizer) feed(text string, final bool) string {
	stops := s.opts.StopStrings
	if len(stops) == 0 {
		return text
	}
	old := len(s.held)
	s.held += text
	if start, end, which := firstMatch(s.held, old, stops); which >= 0 {
		cut := start
		if s.opts.NoStopTrim {
			cut = end
		}
		out := s.held[:cut]
		s.held = ""
		s.matchedStr = stops[which]
		s.done = true
		return out
	}
	if final {
		out := s.held
		s.held = ""
		return out
	}
	keep := heldSuffix(s.held, stops)
	out := s.held[:len(s.held)-keep]
	s.held = s.held[len(s.held)-keep:]
	return out
}

// firstMatch finds the stop string occurrence in text that ends first (at
// equal ends, the one that starts first; then the first in stops), among
// occurrences that end after offset old (earlier ones were looked for when
// that text arrived). which is -1 if there is none.
func firstMatch(text string, old int, stops []string) (start, end, which int) {
	which = -1
	for i, st := range stops {
		from := max(0, old-len(st)+1)
		j := strings.Index(text[from:], st)
		if j < 0 {
			continue
		}
		st0 := from + j
		e := st0 + len(st)
		if which < 0 || e < end || (e == end && st0 < start) {
			start, end, which = st0, e, i
		}
	}
	return start, end, which
}

// heldSuffix returns the length of the longest suffix of text that is a
// proper prefix of a stop string: the text that must wait for more tokens.
// Stop strings are valid UTF-8, so such a suffix starts on a character
// boundary.
func heldSuffix(text string, stops []string) int {
	keep := 0
	for _, st := range stops {
		for k := min(len(st)-1, len(text)); k > keep; k-- {
			if strings.HasSuffix(text, st[:k]) {
				keep = k
				break
			}
		}
	}
	return keep
}

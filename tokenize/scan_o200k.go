package tokenize

import (
	"sync"
	"unicode"
)

// Scanners for o200k_base's pattern and Kimi K2's (tiktoken_load.go: patO200k, patKimi),
// which tell upper from lower case:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Kimi's puts [\p{Han}]+ first, takes Han out of both letter classes and ends the
// punctuation alternative with [\r\n]* (no "/"). tiktoken runs these patterns with Rust's
// fancy_regex, leftmost-first like Oniguruma, so the scanners follow the same
// backtracking order; scan_test.go checks them against regexp2.

// Letter-case classes of the two patterns.
const (
	caseUpper = 1 << iota // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	caseLower             // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
	caseHan               // \p{Han}
)

func caseClassSlow(r rune) uint8 {
	var c uint8
	both := unicode.In(r, unicode.Lm, unicode.Lo, unicode.M)
	if both || unicode.In(r, unicode.Lu, unicode.Lt) {
		c |= caseUpper
	}
	if both || unicode.Is(unicode.Ll, r) {
		c |= caseLower
	}
	if unicode.Is(unicode.Han, r) {
		c |= caseHan
	}
	return c
}

// bmpCase is caseClassSlow of every rune of the Basic Multilingual Plane, built on first
// use (64 KB), as bmpClass is.
var bmpCase = sync.OnceValue(func() *[0x10000]uint8 {
	t := new([0x10000]uint8)
	for r := range t {
		t[r] = caseClassSlow(rune(r))
	}
	return t
})

// caseScanner scans o200k_base's pattern, or Kimi K2's with kimi.
type caseScanner struct{ kimi bool }

// class is r's letter-case class under the scanner's pattern.
func (sc caseScanner) class(r rune) uint8 {
	var c uint8
	switch {
	case r < 0x80:
		if r >= 'A' && r <= 'Z' {
			return caseUpper
		}
		if r >= 'a' && r <= 'z' {
			return caseLower
		}
		return 0
	case r < 0x10000:
		c = bmpCase()[r]
	default:
		c = caseClassSlow(r)
	}
	if sc.kimi && c&caseHan != 0 {
		return caseHan
	}
	return c
}

// run returns the end of the run of runes of class want starting at i.
func (sc caseScanner) run(s string, i int, want uint8) int {
	for i < len(s) {
		r, n := at(s, i)
		if sc.class(r)&want == 0 {
			break
		}
		i += n
	}
	return i
}

func (sc caseScanner) scan(s string, dst [][2]int) [][2]int {
	for i := 0; i < len(s); {
		end := sc.at(s, i)
		dst = append(dst, [2]int{i, end})
		i = end
	}
	return dst
}

func (sc caseScanner) at(s string, i int) int {
	r, n := at(s, i)
	if sc.kimi && sc.class(r) == caseHan {
		return sc.run(s, i, caseHan)
	}
	if e := sc.word(s, i, r, n); e >= 0 {
		return e
	}
	if classOf(r)&clsN != 0 {
		return digitRun(s, i+n, 2)
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n/]*` (Kimi's: `[\r\n]*`)
	trail := "\r\n/"
	if sc.kimi {
		trail = "\r\n"
	}
	if k := punctRun(s, i, r, trail); k >= 0 {
		return k
	}
	return whitespaceTail(s, i, true)
}

// word matches the two letter alternatives at i (r, n: the rune there) in order, each
// with its optional leading [^\r\n\p{L}\p{N}] taken first; it returns the end or -1.
func (sc caseScanner) word(s string, i int, r rune, n int) int {
	starts := [2]int{-1, i}
	if r != '\r' && r != '\n' && classOf(r)&(clsL|clsN) == 0 {
		starts[0] = i + n
	}
	for _, p := range starts {
		if p >= 0 {
			if e := sc.upperThenLower(s, p); e >= 0 {
				return e
			}
		}
	}
	for _, p := range starts {
		if p >= 0 {
			if e := sc.upperRun(s, p); e >= 0 {
				return e
			}
		}
	}
	return -1
}

// upperThenLower is [upper]*[lower]+(contraction)? at p. The greedy upper run gives back
// runes one by one until a lower-class rune can start the lower run: the rune after the
// run when it is lower-class (only \p{Ll} is lower and not upper), else the last rune
// of the run that is in both classes; then the lower run is as long as it can be.
func (sc caseScanner) upperThenLower(s string, p int) int {
	j, bothEnd := p, -1
	for j < len(s) {
		r, n := at(s, j)
		c := sc.class(r)
		if c&caseUpper == 0 {
			break
		}
		j += n
		if c&caseLower != 0 {
			bothEnd = j
		}
	}
	if j < len(s) {
		if r, _ := at(s, j); sc.class(r)&caseLower != 0 {
			return contractionAfter(s, sc.run(s, j, caseLower))
		}
	}
	if bothEnd >= 0 {
		// The lower run starts at the last both-class rune; the runes after it in the
		// upper run are not lower-class, nor is the rune after the run.
		return contractionAfter(s, bothEnd)
	}
	return -1
}

// upperRun is [upper]+[lower]*(contraction)? at p.
func (sc caseScanner) upperRun(s string, p int) int {
	j := sc.run(s, p, caseUpper)
	if j == p {
		return -1
	}
	return contractionAfter(s, sc.run(s, j, caseLower))
}

// contractionAfter extends a match ending at e by an optional case-insensitive
// contraction.
func contractionAfter(s string, e int) int {
	if e < len(s) && s[e] == '\'' {
		if c := contraction(s, e, true); c > 0 {
			return c
		}
	}
	return e
}

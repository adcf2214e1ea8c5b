package tokenize

import (
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Hand-written equivalents of the pre-tokenizer regexes of the common tokenizer families.
// Each one reproduces the leftmost-first, greedy-with-backtracking semantics of the
// Oniguruma pattern it replaces, alternative by alternative; scan_test.go checks them
// against regexp2 on random text. They return byte spans of the matches; text between
// matches is left for the caller (Split keeps it as pieces of its own).

// Character classes, with ASCII fast paths. \s is Unicode White_Space, as in Oniguruma.
const (
	clsL = 1 << iota
	clsN
	clsS // whitespace
	clsP
	clsSym
	clsM
)

var asciiClass = func() (t [128]uint8) {
	for r := 0; r < 128; r++ {
		t[r] = classOfSlow(rune(r))
	}
	return
}()

func classOfSlow(r rune) uint8 {
	var c uint8
	if unicode.IsLetter(r) {
		c |= clsL
	}
	if unicode.IsNumber(r) {
		c |= clsN
	}
	if unicode.IsSpace(r) {
		c |= clsS
	}
	if unicode.IsPunct(r) {
		c |= clsP
	}
	if unicode.IsSymbol(r) {
		c |= clsSym
	}
	if unicode.IsMark(r) {
		c |= clsM
	}
	return c
}

// bmpClass is the class of every rune of the Basic Multilingual Plane, built on first
// use (64 KB); it turns the range-table searches of package unicode into one load.
var bmpClass = sync.OnceValue(func() *[0x10000]uint8 {
	t := new([0x10000]uint8)
	for r := range t {
		t[r] = classOfSlow(rune(r))
	}
	return t
})

func classOf(r rune) uint8 {
	if r < 128 {
		return asciiClass[r]
	}
	if r < 0x10000 {
		return bmpClass()[r]
	}
	return classOfSlow(r)
}

// at decodes the rune at byte offset i (i < len(s)).
func at(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// runOf returns the end of the run of runes starting at i whose class intersects want.
func runOf(s string, i int, want uint8) int {
	for i < len(s) {
		r, n := at(s, i)
		if classOf(r)&want == 0 {
			break
		}
		i += n
	}
	return i
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d at i (s[i] == '\”), optionally
// case-insensitively; it returns the end or -1.
func contraction(s string, i int, fold bool) int {
	lower := func(j int) byte {
		if j >= len(s) {
			return 0
		}
		c := s[j]
		if fold && c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		return c
	}
	switch lower(i + 1) {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if lower(i+2) == 'e' {
			return i + 3
		}
	case 'l':
		if lower(i+2) == 'l' {
			return i + 3
		}
	}
	if fold && i+1 < len(s) {
		// Oniguruma folds ſ (U+017F) to s and K (U+212A) to k.
		if r, n := at(s, i+1); r == 'ſ' {
			return i + 1 + n
		}
	}
	return -1
}

// whitespaceTail handles the shared tail \s*[\r\n]+|\s+(?!\S)|\s+ at i, where s[i] is
// whitespace. withNewline enables the \s*[\r\n]+ alternative.
func whitespaceTail(s string, i int, withNewline bool) int {
	j, lastNL, lastStart, count := i, -1, i, 0
	for j < len(s) {
		r, n := at(s, j)
		if classOf(r)&clsS == 0 {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = j
		}
		lastStart = j
		count++
		j += n
	}
	if withNewline && lastNL >= 0 {
		return lastNL + 1
	}
	if j == len(s) || count < 2 {
		return j
	}
	return lastStart
}

// scanLlama implements the Llama 3 (maxDigits 3) and Qwen2/3 (maxDigits 1) pattern:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func scanLlama(s string, maxDigits int, dst [][2]int) [][2]int {
	for i := 0; i < len(s); {
		end := llamaAt(s, i, maxDigits)
		dst = append(dst, [2]int{i, end})
		i = end
	}
	return dst
}

func llamaAt(s string, i, maxDigits int) int {
	r, n := at(s, i)
	if r == '\'' {
		if e := contraction(s, i, true); e > 0 {
			return e
		}
	}
	c := classOf(r)
	if c&clsL != 0 {
		return runOf(s, i+n, clsL)
	}
	if r != '\r' && r != '\n' && c&clsN == 0 && i+n < len(s) {
		if r2, _ := at(s, i+n); classOf(r2)&clsL != 0 {
			return runOf(s, i+n, clsL)
		}
	}
	if c&clsN != 0 {
		return digitRun(s, i+n, maxDigits-1)
	}
	if k := punctRun(s, i, r, "\r\n"); k >= 0 {
		return k
	}
	return whitespaceTail(s, i, true)
}

// digitRun ends \p{N}{1,max+1}: j follows the first digit, and up to more
// digits follow it.
func digitRun(s string, j, more int) int {
	for k := 0; k < more && j < len(s); k++ {
		r, n := at(s, j)
		if classOf(r)&clsN == 0 {
			break
		}
		j += n
	}
	return j
}

// punctRun matches ` ?[^\s\p{L}\p{N}]+[trail]*` at i (r: the rune there) and
// returns its end, or -1 when it does not match.
func punctRun(s string, i int, r rune, trail string) int {
	other := func(j int) bool {
		if j >= len(s) {
			return false
		}
		r2, _ := at(s, j)
		return classOf(r2)&(clsL|clsN|clsS) == 0
	}
	k := i
	if r == ' ' && other(i+1) {
		k = i + 1
	}
	if !other(k) {
		return -1
	}
	for other(k) {
		_, n := at(s, k)
		k += n
	}
	for k < len(s) && strings.IndexByte(trail, s[k]) >= 0 {
		k++
	}
	return k
}

// scanGPT2 implements the GPT-2 pattern used by the ByteLevel pre-tokenizer:
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func scanGPT2(s string, dst [][2]int) [][2]int {
	for i := 0; i < len(s); {
		end := gpt2At(s, i)
		dst = append(dst, [2]int{i, end})
		i = end
	}
	return dst
}

func gpt2At(s string, i int) int {
	r, n := at(s, i)
	if r == '\'' {
		if e := contraction(s, i, false); e > 0 {
			return e
		}
	}
	k := i
	if r == ' ' && i+1 < len(s) {
		k = i + 1
	}
	if k < len(s) {
		r2, n2 := at(s, k)
		c2 := classOf(r2)
		switch {
		case c2&clsL != 0:
			return runOf(s, k+n2, clsL)
		case c2&clsN != 0:
			return runOf(s, k+n2, clsN)
		case c2&(clsL|clsN|clsS) == 0:
			return runOther(s, k+n2)
		}
	}
	c := classOf(r)
	if k != i && c&clsS == 0 {
		return runOther(s, i+n)
	}
	return whitespaceTail(s, i, false)
}

// runOther extends a run of [^\s\p{L}\p{N}] from i.
func runOther(s string, i int) int {
	for i < len(s) {
		r, n := at(s, i)
		if classOf(r)&(clsL|clsN|clsS) != 0 {
			break
		}
		i += n
	}
	return i
}

// scanDigits3 implements \p{N}{1,3}.
func scanDigits3(s string, dst [][2]int) [][2]int {
	for i := 0; i < len(s); {
		r, n := at(s, i)
		if classOf(r)&clsN == 0 {
			i += n
			continue
		}
		j := i + n
		for k := 1; k < 3 && j < len(s); k++ {
			r2, n2 := at(s, j)
			if classOf(r2)&clsN == 0 {
				break
			}
			j += n2
		}
		dst = append(dst, [2]int{i, j})
		i = j
	}
	return dst
}

func isCJKKana(r rune) bool {
	return (r >= 0x4e00 && r <= 0x9fa5) || (r >= 0x3040 && r <= 0x309f) || (r >= 0x30a0 && r <= 0x30ff)
}

// scanCJK implements [\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+.
func scanCJK(s string, dst [][2]int) [][2]int {
	for i := 0; i < len(s); {
		r, n := at(s, i)
		if !isCJKKana(r) {
			i += n
			continue
		}
		j := i + n
		for j < len(s) {
			r2, n2 := at(s, j)
			if !isCJKKana(r2) {
				break
			}
			j += n2
		}
		dst = append(dst, [2]int{i, j})
		i = j
	}
	return dst
}

// scanDeepSeek implements DeepSeek V3's word pattern:
//
//	[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
//	 ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func scanDeepSeek(s string, dst [][2]int) [][2]int {
	for i := 0; i < len(s); {
		end := deepSeekAt(s, i)
		if end < 0 {
			_, n := at(s, i)
			i += n
			continue
		}
		dst = append(dst, [2]int{i, end})
		i = end
	}
	return dst
}

func isASCIILetter(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }

func deepSeekAt(s string, i int) int {
	r, n := at(s, i)
	if r < 128 && asciiClass[r]&(clsP|clsSym) != 0 && i+1 < len(s) && isASCIILetter(s[i+1]) {
		j := i + 2
		for j < len(s) && isASCIILetter(s[j]) {
			j++
		}
		return j
	}
	c := classOf(r)
	if c&(clsL|clsM) != 0 {
		return runOf(s, i+n, clsL|clsM)
	}
	if r != '\r' && r != '\n' && c&(clsP|clsSym) == 0 && i+n < len(s) {
		if r2, _ := at(s, i+n); classOf(r2)&(clsL|clsM) != 0 {
			return runOf(s, i+n, clsL|clsM)
		}
	}
	k := i
	if r == ' ' && i+1 < len(s) {
		if r2, _ := at(s, i+1); classOf(r2)&(clsP|clsSym) != 0 {
			k = i + 1
		}
	}
	if rk, nk := at(s, k); classOf(rk)&(clsP|clsSym) != 0 {
		j := runOf(s, k+nk, clsP|clsSym)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	if c&clsS != 0 {
		return whitespaceTail(s, i, true)
	}
	return -1
}

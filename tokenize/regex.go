package tokenize

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// matcher finds the non-overlapping matches of a pattern, left to right, as byte spans.
// It stands in for the Oniguruma regexes of HF tokenizers. The patterns real tokenizers
// use are matched by hand-written scanners (scan.go), chosen by comparing the pattern
// string exactly; anything else goes to regexp2, a backtracking engine that, unlike Go's
// regexp, supports the lookahead `(?!\S)` these patterns rely on.
type matcher interface {
	FindAll(s string, dst [][2]int) [][2]int
}

// Patterns with a hand-written scanner, exactly as they appear (JSON-decoded) in
// tokenizer.json files.
const (
	patLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patQwen   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	patDigits = `\p{N}{1,3}`
	patCJK    = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	patDSWord = `[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_` + "`" + `{|}~][A-Za-z]+|[^` + "\r\n" +
		`\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[` + "\r\n" + `]*|\s*[` + "\r\n" +
		`]+|\s+(?!\S)|\s+`
)

// knownScanners maps a pattern to its scanner.
var knownScanners = map[string]func(s string, dst [][2]int) [][2]int{
	patLlama3: func(s string, dst [][2]int) [][2]int { return scanLlama(s, 3, dst) },
	patQwen:   func(s string, dst [][2]int) [][2]int { return scanLlama(s, 1, dst) },
	patGPT2:   scanGPT2,
	patDigits: scanDigits3,
	patCJK:    scanCJK,
	patDSWord: scanDeepSeek,
	patO200k:  caseScanner{}.scan,
	patKimi:   caseScanner{kimi: true}.scan,
}

type scanMatcher struct {
	name string
	scan func(s string, dst [][2]int) [][2]int
}

func (m scanMatcher) FindAll(s string, dst [][2]int) [][2]int { return m.scan(s, dst) }

// literalMatcher finds a fixed string.
type literalMatcher struct{ s string }

func (m literalMatcher) FindAll(s string, dst [][2]int) [][2]int {
	if m.s == "" {
		return dst
	}
	for i := 0; ; {
		j := strings.Index(s[i:], m.s)
		if j < 0 {
			return dst
		}
		dst = append(dst, [2]int{i + j, i + j + len(m.s)})
		i += j + len(m.s)
	}
}

// regexp2Matcher is the general fallback. regexp2 reports rune indices; FindAll converts
// them to byte offsets.
type regexp2Matcher struct{ re *regexp2.Regexp }

func (m regexp2Matcher) FindAll(s string, dst [][2]int) [][2]int {
	if s == "" {
		return dst
	}
	runes := []rune(s)
	byteAt := make([]int, len(runes)+1)
	off := 0
	for i, r := range runes {
		byteAt[i] = off
		off += utf8.RuneLen(r)
	}
	byteAt[len(runes)] = off
	match, err := m.re.FindRunesMatch(runes)
	for err == nil && match != nil {
		start := match.Index
		dst = append(dst, [2]int{byteAt[start], byteAt[start+match.Length]})
		match, err = m.re.FindNextMatch(match)
	}
	return dst
}

// newRegexMatcher returns the scanner for a known pattern, or compiles it with regexp2
// using Oniguruma's Ruby-syntax defaults (^ and $ match at line breaks).
func newRegexMatcher(pattern string) (matcher, error) {
	if scan, ok := knownScanners[pattern]; ok {
		return scanMatcher{name: "scanner", scan: scan}, nil
	}
	if regexp.QuoteMeta(pattern) == pattern {
		return literalMatcher{pattern}, nil
	}
	re, err := regexp2.Compile(pattern, regexp2.Multiline)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", pattern, err)
	}
	return regexp2Matcher{re}, nil
}

// newFallbackMatcher always uses regexp2; tests compare it with the scanners.
func newFallbackMatcher(pattern string) (matcher, error) {
	re, err := regexp2.Compile(pattern, regexp2.Multiline)
	if err != nil {
		return nil, err
	}
	return regexp2Matcher{re}, nil
}

func newPatternMatcher(p patternSpec) (matcher, error) {
	switch {
	case p.String != nil:
		return literalMatcher{*p.String}, nil
	case p.Regex != nil:
		return newRegexMatcher(*p.Regex)
	default:
		return nil, errors.New("pattern is neither String nor Regex")
	}
}

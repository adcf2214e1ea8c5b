package template

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Python str semantics that differ from Go's strings package.

// pyIsSpace is str.isspace for one character: Unicode White_Space plus the
// ASCII information separators \x1c-\x1f, as CPython defines it.
func pyIsSpace(r rune) bool {
	if r >= 0x1c && r <= 0x1f {
		return true
	}
	return unicode.IsSpace(r)
}

// pyIsPrintable is str.isprintable for one character.
func pyIsPrintable(r rune) bool { return unicode.IsPrint(r) }

func pyIsCased(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) }

// pyUpper and pyLower are str.upper and str.lower, including the special
// casings that expand to several characters.
func pyUpper(s string) string {
	if isASCII(s) {
		return strings.ToUpper(s)
	}
	var b strings.Builder
	for _, r := range s {
		switch r {
		case 'ß':
			b.WriteString("SS")
		case 'ŉ':
			b.WriteString("ʼN")
		case 'ﬀ':
			b.WriteString("FF")
		case 'ﬁ':
			b.WriteString("FI")
		case 'ﬂ':
			b.WriteString("FL")
		default:
			b.WriteRune(unicode.ToUpper(r))
		}
	}
	return b.String()
}

func pyLower(s string) string {
	if isASCII(s) {
		return strings.ToLower(s)
	}
	var b strings.Builder
	for _, r := range s {
		if r == 'İ' {
			b.WriteString("i̇")
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// pyTitle is str.title: a cased character following an uncased one is
// title-cased, the others lowered.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		if prevCased {
			b.WriteString(pyLower(string(r)))
		} else {
			b.WriteRune(unicode.ToTitle(r))
		}
		prevCased = pyIsCased(r)
	}
	return b.String()
}

// pyCapitalize is str.capitalize: first character title-cased, rest lowered.
func pyCapitalize(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToTitle(r)) + pyLower(s[n:])
}

// pyStrip is str.strip/lstrip/rstrip with optional chars (nil: whitespace).
func pyStrip(s string, chars *string, left, right bool) string {
	f := pyIsSpace
	if chars != nil {
		set := *chars
		f = func(r rune) bool { return strings.ContainsRune(set, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, f)
	}
	if right {
		s = strings.TrimRightFunc(s, f)
	}
	return s
}

// pySplit is str.split(sep, maxsplit); sep nil splits on whitespace runs.
func pySplit(s string, sep *string, maxsplit int) []any {
	var out []any
	if sep == nil {
		rest := s
		for {
			rest = strings.TrimLeftFunc(rest, pyIsSpace)
			if rest == "" {
				break
			}
			if maxsplit >= 0 && len(out) == maxsplit {
				out = append(out, rest)
				break
			}
			end := strings.IndexFunc(rest, pyIsSpace)
			if end < 0 {
				out = append(out, rest)
				break
			}
			out = append(out, rest[:end])
			rest = rest[end:]
		}
		if out == nil {
			out = []any{}
		}
		return out
	}
	parts := strings.SplitN(s, *sep, maxsplit+1)
	if maxsplit < 0 {
		parts = strings.Split(s, *sep)
	}
	out = make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out
}

// pyRSplit is str.rsplit(sep, maxsplit).
func pyRSplit(s string, sep *string, maxsplit int) []any {
	if maxsplit < 0 {
		return pySplit(s, sep, -1)
	}
	var rev []string
	rest := s
	for len(rev) < maxsplit {
		if sep == nil {
			rest = strings.TrimRightFunc(rest, pyIsSpace)
			i := strings.LastIndexFunc(rest, pyIsSpace)
			if i < 0 {
				break
			}
			_, sz := utf8.DecodeRuneInString(rest[i:])
			rev = append(rev, rest[i+sz:])
			rest = rest[:i]
		} else {
			i := strings.LastIndex(rest, *sep)
			if i < 0 {
				break
			}
			rev = append(rev, rest[i+len(*sep):])
			rest = rest[:i]
		}
	}
	if sep == nil {
		rest = strings.TrimRightFunc(rest, pyIsSpace)
		if rest != "" {
			rev = append(rev, strings.TrimLeftFunc(rest, pyIsSpace))
		}
	} else {
		rev = append(rev, rest)
	}
	out := make([]any, 0, len(rev))
	for i := len(rev) - 1; i >= 0; i-- {
		out = append(out, rev[i])
	}
	return out
}

// pySplitlines is str.splitlines(keepends=False).
func pySplitlines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch r {
		case '\n', '\v', '\f', '\x1c', '\x1d', '\x1e', '\u0085', '\u2028', '\u2029':
			out = append(out, s[start:i])
			start = i + n
		case '\r':
			out = append(out, s[start:i])
			if i+1 < len(s) && s[i+1] == '\n' {
				n++
			}
			start = i + n
		}
		i += n
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// runeIndex converts a byte offset in s to a code point offset.
func runeIndex(s string, byteOff int) int {
	if byteOff < 0 {
		return -1
	}
	return utf8.RuneCountInString(s[:byteOff])
}

// runeSlice returns s[start:end] in code points, clamped like Python.
func runeSlice(s string, start, end int) string {
	n := utf8.RuneCountInString(s)
	if start < 0 {
		start = max(start+n, 0)
	}
	if end < 0 {
		end = max(end+n, 0)
	}
	end = min(end, n)
	if start >= end {
		return ""
	}
	return string([]rune(s)[start:end])
}

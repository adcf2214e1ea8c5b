package tokenize

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Normalizer rewrites a piece of text before pre-tokenization. Offsets are not tracked:
// the router needs ids, not alignments, and dropping alignment bookkeeping is what makes
// normalization a single pass.
type Normalizer interface {
	Normalize(s string) string
}

type componentSpec struct {
	Type string `json:"type"`
}

// patternSpec is HF's {"String": "..."} | {"Regex": "..."}.
type patternSpec struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

func newNormalizer(raw json.RawMessage) (Normalizer, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c componentSpec
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	switch c.Type {
	case "NFC":
		return formNormalizer{norm.NFC}, nil
	case "NFD":
		return formNormalizer{norm.NFD}, nil
	case "NFKC":
		return formNormalizer{norm.NFKC}, nil
	case "NFKD":
		return formNormalizer{norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNormalizer{}, nil
	case "Strip":
		var s struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("normalizer Strip: %w", err)
		}
		return stripNormalizer{left: s.Left, right: s.Right}, nil
	case "StripAccents":
		return stripAccentsNormalizer{}, nil
	case "Prepend":
		var s struct {
			Prepend string `json:"prepend"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("normalizer Prepend: %w", err)
		}
		return prependNormalizer{s.Prepend}, nil
	case "Replace":
		var s struct {
			Pattern patternSpec `json:"pattern"`
			Content string      `json:"content"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("normalizer Replace: %w", err)
		}
		m, err := newPatternMatcher(s.Pattern)
		if err != nil {
			return nil, fmt.Errorf("normalizer Replace: %w", err)
		}
		return replaceNormalizer{m: m, content: s.Content}, nil
	case "ByteLevel":
		return byteLevelNormalizer{}, nil
	case "BertNormalizer":
		return newBertNormalizer(raw)
	case "Precompiled":
		return newPrecompiled(raw)
	case "Sequence":
		var s struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("normalizer Sequence: %w", err)
		}
		var seq sequenceNormalizer
		for _, r := range s.Normalizers {
			n, err := newNormalizer(r)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		if len(seq) == 0 {
			return nil, nil
		}
		return seq, nil
	default:
		return nil, fmt.Errorf("normalizer type %q is not supported", c.Type)
	}
}

type formNormalizer struct{ f norm.Form }

func (n formNormalizer) Normalize(s string) string {
	if n.f.IsNormalString(s) {
		return s
	}
	return n.f.String(s)
}

type sequenceNormalizer []Normalizer

func (seq sequenceNormalizer) Normalize(s string) string {
	for _, n := range seq {
		s = n.Normalize(s)
	}
	return s
}

type prependNormalizer struct{ prefix string }

// Normalize prepends only to non-empty text, as HF does.
func (n prependNormalizer) Normalize(s string) string {
	if s == "" {
		return s
	}
	return n.prefix + s
}

type replaceNormalizer struct {
	m       matcher
	content string
}

func (n replaceNormalizer) Normalize(s string) string { return replaceAll(n.m, s, n.content) }

func replaceAll(m matcher, s, content string) string {
	if lit, ok := m.(literalMatcher); ok {
		if lit.s == "" {
			return s
		}
		return strings.ReplaceAll(s, lit.s, content)
	}
	spans := m.FindAll(s, nil)
	if len(spans) == 0 {
		return s
	}
	var sb strings.Builder
	prev := 0
	for _, sp := range spans {
		sb.WriteString(s[prev:sp[0]])
		sb.WriteString(content)
		prev = sp[1]
	}
	sb.WriteString(s[prev:])
	return sb.String()
}

type stripNormalizer struct{ left, right bool }

func (n stripNormalizer) Normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

type stripAccentsNormalizer struct{}

// Normalize removes every combining mark — non-spacing (Mn), spacing (Mc) and enclosing
// (Me) — as HF StripAccents does (it is meant to follow NFD or NFKD). BertNormalizer's
// own accent stripping removes Mn only (stripNonspacingMarks).
func (stripAccentsNormalizer) Normalize(s string) string {
	return removeRunes(s, unicode.M)
}

// removeRunes drops the runes of table, returning s itself when there are none.
func removeRunes(s string, table *unicode.RangeTable) string {
	if strings.IndexFunc(s, func(r rune) bool { return unicode.Is(table, r) }) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if unicode.Is(table, r) {
			return -1
		}
		return r
	}, s)
}

type byteLevelNormalizer struct{}

func (byteLevelNormalizer) Normalize(s string) string { return bytesUnicode.encode(s) }

type lowercaseNormalizer struct{}

// Normalize lowercases like Rust's str::to_lowercase: full mappings (İ → i̇) and the
// Greek final sigma rule, which Go's per-rune ToLower lacks.
func (lowercaseNormalizer) Normalize(s string) string {
	var sb strings.Builder
	sb.Grow(len(s))
	for i, r := range s {
		switch {
		case r == 'İ':
			sb.WriteString("i\u0307")
		case r == 'Σ':
			if finalSigma(s, i) {
				sb.WriteRune('ς')
			} else {
				sb.WriteRune('σ')
			}
		default:
			sb.WriteRune(unicode.ToLower(r))
		}
	}
	return sb.String()
}

// finalSigma: preceded by a cased letter (skipping case-ignorable runes) and not followed
// by one.
func finalSigma(s string, i int) bool {
	cased := func(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) }
	ignorable := func(r rune) bool {
		return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk) || r == '\'' || r == '.' || r == ':'
	}
	before := false
	for j := i; j > 0; {
		r, size := utf8.DecodeLastRuneInString(s[:j])
		j -= size
		if ignorable(r) {
			continue
		}
		before = cased(r)
		break
	}
	if !before {
		return false
	}
	for j := i + len("Σ"); j < len(s); {
		r, size := utf8.DecodeRuneInString(s[j:])
		j += size
		if ignorable(r) {
			continue
		}
		return !cased(r)
	}
	return true
}

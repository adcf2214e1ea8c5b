package tokenize

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// bertNormalizer is HF's BertNormalizer, in its order: clean the text (drop NUL, U+FFFD
// and "other" runes — control, format, private use, unassigned — and turn every
// whitespace rune, \t \n \r included, into a space), put spaces around CJK ideographs
// so each becomes its own word, strip accents (NFD, then drop non-spacing marks — Mn
// only, where the StripAccents normalizer drops every mark), and
// lowercase. strip_accents left null follows lowercase, as in the original BERT
// (uncased models lose their accents, cased ones keep them).
type bertNormalizer struct {
	cleanText, chineseChars, stripAccents, lowercase bool
}

func newBertNormalizer(raw json.RawMessage) (Normalizer, error) {
	var s struct {
		CleanText    *bool `json:"clean_text"`
		ChineseChars *bool `json:"handle_chinese_chars"`
		StripAccents *bool `json:"strip_accents"`
		Lowercase    *bool `json:"lowercase"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("normalizer BertNormalizer: %w", err)
	}
	orTrue := func(b *bool) bool { return b == nil || *b }
	n := bertNormalizer{cleanText: orTrue(s.CleanText), chineseChars: orTrue(s.ChineseChars), lowercase: orTrue(s.Lowercase)}
	n.stripAccents = n.lowercase
	if s.StripAccents != nil {
		n.stripAccents = *s.StripAccents
	}
	return n, nil
}

func (n bertNormalizer) Normalize(s string) string {
	if n.cleanText || n.chineseChars {
		s = n.cleanAndSpace(s)
	}
	if n.stripAccents {
		s = removeRunes(norm.NFD.String(s), unicode.Mn)
	}
	if n.lowercase {
		s = lowercaseRunes(s)
	}
	return s
}

// lowercaseRunes lowercases rune by rune, as Rust's char::to_lowercase does: full
// mappings (İ → i̇) but, unlike the Lowercase normalizer's str::to_lowercase, no
// context, so a word-final Σ becomes σ, not ς.
func lowercaseRunes(s string) string {
	if !strings.ContainsRune(s, 'İ') {
		return strings.Map(unicode.ToLower, s)
	}
	var sb strings.Builder
	sb.Grow(len(s) + 8)
	for _, r := range s {
		if r == 'İ' {
			sb.WriteString("i\u0307")
			continue
		}
		sb.WriteRune(unicode.ToLower(r))
	}
	return sb.String()
}

// cleanAndSpace does the first two steps in one pass; it returns s itself when neither
// changes anything (plain words and spaces), which is the common case.
func (n bertNormalizer) cleanAndSpace(s string) string {
	var sb strings.Builder
	changed := false
	copied := 0 // s[:copied] has been written to sb
	for i, r := range s {
		var repl string
		switch {
		case r >= ' ' && r < 0x7F:
			continue // the ASCII fast path: nothing below applies
		case n.cleanText && (r == 0 || r == unicode.ReplacementChar || isBertControl(r)):
			repl = ""
		case n.cleanText && unicode.IsSpace(r):
			repl = " "
		case n.chineseChars && isCJKIdeograph(r):
			repl = " " + string(r) + " "
		default:
			continue
		}
		if !changed {
			changed = true
			sb.Grow(len(s) + 8)
		}
		sb.WriteString(s[copied:i])
		sb.WriteString(repl)
		copied = i + utf8.RuneLen(r)
	}
	if !changed {
		return s
	}
	sb.WriteString(s[copied:])
	return sb.String()
}

// isBertControl is Rust's char::is_other (general categories Cc, Cf, Co and unassigned)
// except for \t \n \r, which BERT counts as whitespace. Valid UTF-8 holds no
// surrogates, so "other" is "in none of the categories L, M, N, P, S, Z". Go's tables
// are Unicode 15.0 and the reference's older, so a rune assigned in between is kept
// here and dropped there.
func isBertControl(r rune) bool {
	if r == '\t' || r == '\n' || r == '\r' {
		return false
	}
	return !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z)
}

// isCJKIdeograph is BERT's "Chinese character": the CJK Unified Ideographs blocks and
// their extensions A–E, and the compatibility ideographs, with the ranges HF uses
// (which, like the original BERT code, start the Extension E range at U+2B920, not
// U+2B820). Hangul, kana and CJK punctuation are not in it.
func isCJKIdeograph(r rune) bool {
	switch {
	case r < 0x3400:
		return false
	case r <= 0x4DBF, 0x4E00 <= r && r <= 0x9FFF, 0xF900 <= r && r <= 0xFAFF:
		return true
	case 0x20000 <= r && r <= 0x2A6DF, 0x2A700 <= r && r <= 0x2B73F, 0x2B740 <= r && r <= 0x2B81F,
		0x2B920 <= r && r <= 0x2CEAF, 0x2F800 <= r && r <= 0x2FA1F:
		return true
	}
	return false
}

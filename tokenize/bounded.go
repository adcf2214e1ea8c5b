package tokenize

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrTooManyTokens is returned (wrapped in a *TooManyTokensError) by
// EncodeLimit when a text has more tokens than the limit.
var ErrTooManyTokens = errors.New("more tokens than the limit")

// TooManyTokensError says that a text has more than Limit tokens; AtLeast is
// how many it was known to have when encoding stopped (> Limit).
type TooManyTokensError struct{ Limit, AtLeast int }

func (e *TooManyTokensError) Error() string {
	return fmt.Sprintf("at least %d tokens, more than the limit of %d", e.AtLeast, e.Limit)
}

func (e *TooManyTokensError) Unwrap() error { return ErrTooManyTokens }

// encodeWindow is how much of one pre-tokenizer input (the text between
// added tokens, normalized) is pre-tokenized at once, where the
// pre-tokenizer allows it to be cut (see cutSafe). The pre-token and match
// buffers then hold one window's pieces, not a whole multi-megabyte text's:
// an 8 MiB text allocated 869 MB in one Encode before windows.
const encodeWindow = 64 << 10

// EncodeLimit is Encode for texts that may be far longer than any model's
// context: it stops, with a *TooManyTokensError wrapping ErrTooManyTokens,
// as soon as the text is known to have more than maxTokens tokens (the
// post-processor's special tokens included), so that a huge text costs
// memory in proportion to the limit, not to its length. maxTokens <= 0 is no
// limit. The ids are exactly Encode's when there are at most maxTokens.
func (t *Tokenizer) EncodeLimit(text string, addSpecialTokens bool, maxTokens int) ([]uint32, error) {
	return t.encodeBounded(text, addSpecialTokens, nil, maxTokens, encodeWindow)
}

// minTokens is a lower bound of the tokens of one pre-tokenizer input of a
// byte-level BPE model: no token covers more bytes than the longest one in
// the vocabulary, and every byte has a token. 0 for other models, where an
// unknown-word token may cover any length.
func (t *Tokenizer) minTokens(s string) int {
	if t.maxTokenBytes == 0 {
		return 0
	}
	return (len(s) + t.maxTokenBytes - 1) / t.maxTokenBytes
}

// byteLevelMaxTokenBytes is the byte length of the longest token of a
// byte-level BPE vocabulary (one byte per rune of its byte-level spelling);
// 0 when the model does not read raw bytes.
func byteLevelMaxTokenBytes(m *bpeModel) int {
	if m == nil || !m.byteLevelOK {
		return 0
	}
	n := 0
	for _, tok := range m.vocabR {
		n = max(n, utf8.RuneCountInString(tok))
	}
	return n
}

// cutKind is how a pre-tokenizer treats a cut before a space that sits
// between two ASCII letters ("word| word").
type cutKind int

const (
	// cutUnknown: the pre-tokenizer may join the two sides of such a cut.
	cutUnknown cutKind = iota
	// cutSplits: the pre-tokenizer always ends a piece there, and what it
	// makes of the text after the cut does not depend on the text before
	// (nor the other way round), so pre-tokenizing the two sides apart gives
	// the same pieces as the whole.
	cutSplits
	// cutUntouched: the pre-tokenizer never matches an ASCII letter or a
	// space (digit and CJK splitters), so the piece holding the cut reaches
	// the next step whole, as if this one were not there.
	cutUntouched
)

// wordScanners are the hand-written pre-tokenizer patterns that end a
// match at every letter-to-space change and start the next one at the
// space; scan_test.go checks each one against the regex it stands for.
var wordScanners = map[string]bool{patLlama3: true, patQwen: true, patGPT2: true, patDSWord: true, patO200k: true, patKimi: true}

// untouchingScanners never match an ASCII letter or a space.
var untouchingScanners = map[string]bool{patDigits: true, patCJK: true}

// regexCut is how a Split by pattern treats a window cut. A word scanner's
// matches cover the whole text, so keeping the matches (Isolated) and
// keeping only the matches (Removed, inverted: tiktoken's way) give the
// same pieces.
func regexCut(pattern string, b splitBehavior, invert bool) cutKind {
	switch {
	case wordScanners[pattern] && (b == behaviorIsolated && !invert || b == behaviorRemoved && invert):
		return cutSplits
	case untouchingScanners[pattern] && !invert:
		return cutUntouched
	}
	return cutUnknown
}

// cutSafe reports whether text may be pre-tokenized in windows cut before a
// space between two ASCII letters, with exactly the pieces of the whole:
// some step splits there, and every step before it leaves the cut alone.
// Steps after the split see each piece on its own, as they always do.
func cutSafe(pt PreTokenizer) bool {
	for _, step := range steps(pt) {
		switch cutOf(step) {
		case cutSplits:
			return true
		case cutUntouched:
			continue
		default:
			return false
		}
	}
	return false
}

func steps(pt PreTokenizer) []PreTokenizer {
	if seq, ok := pt.(sequencePreTokenizer); ok {
		var out []PreTokenizer
		for _, p := range seq {
			out = append(out, steps(p)...)
		}
		return out
	}
	return []PreTokenizer{pt}
}

func cutOf(pt PreTokenizer) cutKind {
	switch p := pt.(type) {
	case splitPreTokenizer:
		return p.cut
	case byteLevelPreTokenizer:
		if p.useRegex {
			return cutSplits // the GPT-2 pattern
		}
	case metaspace:
		if p.split {
			return cutSplits // a piece starts at every ▁, and spaces became ▁
		}
	}
	return cutUnknown
}

// nextCut returns where to end the window that starts s: before a space
// between two ASCII letters, the last one within window bytes (if past the
// window's first half), else the first one after; len(s) when there is
// none or s fits the window.
func nextCut(s string, window int) int {
	if len(s) <= window {
		return len(s)
	}
	for i := window; i > window/2; i-- {
		if isCut(s, i) {
			return i
		}
	}
	for i := window + 1; i < len(s)-1; i++ {
		if isCut(s, i) {
			return i
		}
	}
	return len(s)
}

func isCut(s string, i int) bool {
	return i > 0 && i+1 < len(s) && s[i] == ' ' && isASCIILetter(s[i-1]) && isASCIILetter(s[i+1])
}

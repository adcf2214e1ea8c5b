package tokenize

import (
	"errors"
	"fmt"
)

// ByteRange is a byte range [Start, End) of a text.
type ByteRange struct{ Start, End int }

// ErrBadSpans is returned (wrapped) by EncodeWithLiteralSpans for spans that
// are unsorted, overlapping or outside the text.
var ErrBadSpans = errors.New("literal spans must be sorted, disjoint and within the text")

// EncodeSplitSpecialTokens is Encode with Hugging Face's
// split_special_tokens=True: special added tokens written in text are
// tokenized as ordinary text, non-special added tokens are still recognised.
func (t *Tokenizer) EncodeSplitSpecialTokens(text string, addSpecialTokens bool) ([]uint32, error) {
	return t.EncodeWithLiteralSpans(text, addSpecialTokens, []ByteRange{{0, len(text)}})
}

// EncodeWithLiteralSpans is Encode, except that no special added token is
// recognised that overlaps one of the literal spans: inside them special
// tokens are text, as with split_special_tokens, while outside them they
// are control tokens as usual. It lets a caller tokenize a rendered prompt
// in one pass (so that every boundary between template text and client text
// tokenizes exactly as Encode would) while client-supplied text cannot forge
// control tokens.
//
// Splitting is done span by span, so an added token is never matched across
// a span's edge, and an lstrip/rstrip token does not swallow whitespace on
// the other side of an edge; text on both sides of an edge is then
// normalized and pre-tokenized as one piece. Normalized special tokens are
// not recognised in any piece that contains literal text.
func (t *Tokenizer) EncodeWithLiteralSpans(text string, addSpecialTokens bool, literal []ByteRange) ([]uint32, error) {
	return t.EncodeWithLiteralSpansLimit(text, addSpecialTokens, literal, 0)
}

// EncodeWithLiteralSpansLimit is EncodeWithLiteralSpans that stops as
// EncodeLimit does once the text has more than maxTokens tokens (0: no
// limit).
func (t *Tokenizer) EncodeWithLiteralSpansLimit(text string, addSpecialTokens bool, literal []ByteRange, maxTokens int) ([]uint32, error) {
	prev := 0
	for _, s := range literal {
		if s.Start < prev || s.End < s.Start || s.End > len(text) {
			return nil, fmt.Errorf("encode: %w: %v in %d bytes", ErrBadSpans, s, len(text))
		}
		prev = s.End
	}
	return t.encodeBounded(text, addSpecialTokens, literal, maxTokens, encodeWindow)
}

// splitLiteral is addedVocab.split over the whole text, region by region:
// literal regions with the non-special matcher, the others with the full one.
// Adjacent text pieces of different regions are joined again, because Encode
// normalizes and pre-tokenizes the text between added tokens as one piece.
func (av *addedVocab) splitLiteral(dst []segment, text string, literal []ByteRange) []segment {
	base := len(dst)
	var ends []int // end offset in text of each segment appended
	region := func(start, end int, lit bool) {
		if start >= end {
			return
		}
		trie := av.raw
		if lit {
			trie = av.rawPlain
		}
		n := len(dst)
		dst = av.split(dst, text[start:end], start == 0, trie)
		off := start
		for i := n; i < len(dst); i++ {
			dst[i].literal = lit && dst[i].id < 0
			off += len(dst[i].text)
			ends = append(ends, off)
		}
	}
	pos := 0
	for _, s := range literal {
		region(pos, s.Start, false)
		region(s.Start, s.End, true)
		pos = s.End
	}
	region(pos, len(text), false)

	// Join runs of text segments.
	out := dst[:base]
	start := 0
	for i := base; i < len(dst); i++ {
		seg, end := dst[i], ends[i-base]
		if k := len(out) - 1; k >= base && seg.id < 0 && out[k].id < 0 {
			out[k].text = text[start:end]
			out[k].literal = out[k].literal || seg.literal
			continue
		}
		start = end - len(seg.text)
		out = append(out, seg)
	}
	return out
}

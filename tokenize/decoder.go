package tokenize

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// PieceDecoder turns tokens back into text. DecodeChain maps the token strings to new strings,
// which the next decoder in a sequence receives; the final result is their concatenation
// (HF decode_chain).
type PieceDecoder interface {
	DecodeChain(tokens []string) []string
}

func newDecoder(raw json.RawMessage) (PieceDecoder, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c componentSpec
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	switch c.Type {
	case "ByteLevel":
		return byteLevelDecoder{}, nil
	case "ByteFallback":
		return byteFallbackDecoder{}, nil
	case "Fuse":
		return fuseDecoder{}, nil
	case "WordPiece":
		s := struct {
			Prefix  string `json:"prefix"`
			Cleanup bool   `json:"cleanup"`
		}{Prefix: "##", Cleanup: true}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("decoder WordPiece: %w", err)
		}
		return wordPieceDecoder{prefix: s.Prefix, cleanup: s.Cleanup}, nil
	case "Strip":
		var s struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("decoder Strip: %w", err)
		}
		r, _ := utf8.DecodeRuneInString(s.Content)
		return stripDecoder{content: r, start: s.Start, stop: s.Stop}, nil
	case "Replace":
		var s struct {
			Pattern patternSpec `json:"pattern"`
			Content string      `json:"content"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("decoder Replace: %w", err)
		}
		m, err := newPatternMatcher(s.Pattern)
		if err != nil {
			return nil, fmt.Errorf("decoder Replace: %w", err)
		}
		return replaceDecoder{m: m, content: s.Content}, nil
	case "Metaspace":
		pt, err := newPreTokenizer(raw)
		if err != nil {
			return nil, err
		}
		ms := pt.(metaspace)
		return metaspaceDecoder{replacement: ms.replacement, prepend: ms.scheme != "never"}, nil
	case "Sequence":
		var s struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("decoder Sequence: %w", err)
		}
		var seq sequenceDecoder
		for _, r := range s.Decoders {
			d, err := newDecoder(r)
			if err != nil {
				return nil, err
			}
			if d != nil {
				seq = append(seq, d)
			}
		}
		return seq, nil
	default:
		return nil, fmt.Errorf("decoder type %q is not supported", c.Type)
	}
}

type sequenceDecoder []PieceDecoder

func (seq sequenceDecoder) DecodeChain(tokens []string) []string {
	for _, d := range seq {
		tokens = d.DecodeChain(tokens)
	}
	return tokens
}

// byteLevelDecoder maps byte-level runes back to bytes and decodes the bytes as UTF-8,
// replacing invalid sequences with U+FFFD the way Rust's from_utf8_lossy does.
type byteLevelDecoder struct{}

func (byteLevelDecoder) DecodeChain(tokens []string) []string {
	var buf []byte
	for _, t := range tokens {
		buf = bytesUnicode.decodeToken(buf, t)
	}
	return []string{lossyUTF8(buf)}
}

// lossyUTF8 replaces each maximal invalid subpart of b with one U+FFFD (the
// Unicode-recommended practice Rust follows; Go's own conversions replace per byte).
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || size > 1 {
			sb.Write(b[i : i+size])
			i += size
			continue
		}
		sb.WriteString("\uFFFD")
		i += invalidSubpartLen(b[i:])
	}
	return sb.String()
}

// invalidSubpartLen is the length of the maximal prefix of b that could begin a valid
// UTF-8 sequence (at least 1).
func invalidSubpartLen(b []byte) int {
	lead := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case lead >= 0xC2 && lead <= 0xDF:
		need = 1
	case lead == 0xE0:
		need, lo = 2, 0xA0
	case lead == 0xED:
		need, hi = 2, 0x9F
	case lead >= 0xE1 && lead <= 0xEF:
		need = 2
	case lead == 0xF0:
		need, lo = 3, 0x90
	case lead == 0xF4:
		need, hi = 3, 0x8F
	case lead >= 0xF1 && lead <= 0xF3:
		need = 3
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		c := b[n]
		if k == 0 {
			if c < lo || c > hi {
				break
			}
		} else if c < 0x80 || c > 0xBF {
			break
		}
		n++
	}
	return n
}

// byteFallbackDecoder turns runs of <0xNN> tokens back into bytes; a run that is not
// valid UTF-8 becomes one U+FFFD per byte, as in HF.
type byteFallbackDecoder struct{}

func (byteFallbackDecoder) DecodeChain(tokens []string) []string {
	out := make([]string, 0, len(tokens))
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			for range pending {
				out = append(out, "\uFFFD")
			}
		}
		pending = pending[:0]
	}
	for _, t := range tokens {
		if len(t) == 6 && strings.HasPrefix(t, "<0x") && t[5] == '>' {
			if v, err := strconv.ParseUint(t[3:5], 16, 8); err == nil {
				pending = append(pending, byte(v))
				continue
			}
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

type fuseDecoder struct{}

func (fuseDecoder) DecodeChain(tokens []string) []string {
	return []string{strings.Join(tokens, "")}
}

// stripDecoder removes up to start leading and stop trailing copies of content from
// every token.
type stripDecoder struct {
	content     rune
	start, stop int
}

func (d stripDecoder) DecodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		runes := []rune(t)
		lo := 0
		for lo < d.start && lo < len(runes) && runes[lo] == d.content {
			lo++
		}
		hi := len(runes)
		for k := 0; k < d.stop && hi > 0 && runes[hi-1] == d.content; k++ {
			hi--
		}
		if hi < lo {
			hi = lo
		}
		out[i] = string(runes[lo:hi])
	}
	return out
}

type replaceDecoder struct {
	m       matcher
	content string
}

func (d replaceDecoder) DecodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		out[i] = replaceAll(d.m, t, d.content)
	}
	return out
}

// metaspaceDecoder turns ▁ back into spaces; in the first token they are dropped when
// the pre-tokenizer prepends one.
type metaspaceDecoder struct {
	replacement rune
	prepend     bool
}

func (d metaspaceDecoder) DecodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		out[i] = strings.Map(func(r rune) rune {
			if r != d.replacement {
				return r
			}
			if i == 0 && d.prepend {
				return -1
			}
			return ' '
		}, t)
	}
	return out
}

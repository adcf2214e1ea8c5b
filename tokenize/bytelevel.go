package tokenize

import "strings"

// byteLevel is the GPT-2 byte↔unicode table: every byte gets a printable rune, so a
// byte-level vocabulary can spell arbitrary bytes with ordinary strings. Bytes that are
// already printable (!..~, ¡..¬, ®..ÿ) map to themselves; the other 68 map to U+0100 onward
// in byte order.
type byteLevelTable struct {
	toRune [256]rune
	toByte map[rune]byte
	// encoded holds the UTF-8 form of toRune[b], so mapping a string is a table copy.
	encoded [256]string
}

var bytesUnicode = newByteLevelTable()

func newByteLevelTable() *byteLevelTable {
	t := &byteLevelTable{toByte: make(map[rune]byte, 256)}
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !printable(b) {
			r = rune(256 + n)
			n++
		}
		t.toRune[b] = r
		t.toByte[r] = byte(b)
		t.encoded[b] = string(r)
	}
	return t
}

// encode maps every byte of s to its byte-level rune.
func (t *byteLevelTable) encode(s string) string {
	var sb strings.Builder
	sb.Grow(len(s) * 2)
	for i := 0; i < len(s); i++ {
		sb.WriteString(t.encoded[s[i]])
	}
	return sb.String()
}

// decodeToken appends the bytes a byte-level token stands for. A token holding a rune
// outside the table (an added token such as "<｜User｜>") is taken verbatim, as HF does.
func (t *byteLevelTable) decodeToken(dst []byte, tok string) []byte {
	start := len(dst)
	for _, r := range tok {
		b, ok := t.toByte[r]
		if !ok {
			return append(dst[:start], tok...)
		}
		dst = append(dst, b)
	}
	return dst
}

package tokenize

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/rivo/uniseg"
)

// precompiledNormalizer is HF's Precompiled normalizer: the character map SentencePiece
// compiles into a model (nmt_nfkc and friends: NFKC plus SentencePiece's own fixes),
// stored in tokenizer.json as base64. The blob is a little-endian uint32 byte size of a
// darts-clone double-array trie, the trie's uint32 units, then NUL-terminated
// replacement strings that the trie's values point into.
//
// It is applied the way HF applies it, quirks included: the text is cut into extended
// grapheme clusters; a cluster shorter than 6 bytes is looked up whole and, when any
// prefix of it is a key, replaced by the replacement of the SHORTEST such prefix (the
// rest of the cluster is dropped); otherwise each rune of the cluster is looked up on
// its own. A NUL byte ends every lookup, so NUL is never mapped.
type precompiledNormalizer struct {
	trie []uint32
	pool string
	// ascii[b] is the lookup result for the one-byte string b (-1: no key), which is
	// the whole answer for the common case of an ASCII rune that is its own cluster.
	ascii [utf8.RuneSelf]int32
}

func newPrecompiled(raw json.RawMessage) (Normalizer, error) {
	var s struct {
		Charsmap *string `json:"precompiled_charsmap"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("normalizer Precompiled: %w", err)
	}
	if s.Charsmap == nil || *s.Charsmap == "" {
		return nil, nil // an empty map changes nothing
	}
	blob, err := base64.StdEncoding.DecodeString(*s.Charsmap)
	if err != nil {
		return nil, fmt.Errorf("normalizer Precompiled: precompiled_charsmap: %w", err)
	}
	n, err := parseCharsmap(blob)
	if err != nil {
		return nil, fmt.Errorf("normalizer Precompiled: %w", err)
	}
	return n, nil
}

func parseCharsmap(blob []byte) (*precompiledNormalizer, error) {
	if len(blob) < 4 {
		return nil, errors.New("charsmap shorter than its header")
	}
	size := binary.LittleEndian.Uint32(blob)
	if size%4 != 0 || uint64(size) > uint64(len(blob)-4) || size == 0 {
		return nil, fmt.Errorf("charsmap trie size %d does not fit a %d-byte blob", size, len(blob))
	}
	n := &precompiledNormalizer{trie: make([]uint32, size/4)}
	for i := range n.trie {
		n.trie[i] = binary.LittleEndian.Uint32(blob[4+4*i:])
	}
	n.pool = string(blob[4+size:])
	if !utf8.ValidString(n.pool) {
		return nil, errors.New("charsmap replacements are not valid UTF-8")
	}
	for b := range n.ascii {
		n.ascii[b] = n.lookup(string(rune(b)))
	}
	return n, nil
}

// lookup walks the trie over key's bytes and returns the value of the shortest key that
// is a prefix of it (an offset into pool), or -1. Out-of-range units end the walk, so a
// corrupt trie yields "no key" instead of a panic.
func (n *precompiledNormalizer) lookup(key string) int32 {
	unitAt := func(i uint32) (uint32, bool) {
		if int(i) >= len(n.trie) {
			return 0, false
		}
		return n.trie[i], true
	}
	// darts-clone unit layout: bit 8 has_leaf, low 8 bits (and bit 31) the label,
	// bits 10.. the offset (shifted by 8 more when bit 9 is set), leaf value in 31 bits.
	offset := func(u uint32) uint32 { return (u >> 10) << ((u & (1 << 9)) >> 6) }
	pos := offset(n.trie[0])
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c == 0 {
			break
		}
		pos ^= uint32(c)
		u, ok := unitAt(pos)
		if !ok || u&((1<<31)|0xFF) != uint32(c) {
			return -1
		}
		pos ^= offset(u)
		if (u>>8)&1 == 1 {
			leaf, ok := unitAt(pos)
			if !ok {
				return -1
			}
			return int32(leaf & (1<<31 - 1))
		}
	}
	return -1
}

// replacement is the NUL-terminated string at pool offset v.
func (n *precompiledNormalizer) replacement(v int32) string {
	if int(v) >= len(n.pool) {
		return ""
	}
	s := n.pool[v:]
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return s
}

func (n *precompiledNormalizer) Normalize(s string) string {
	var sb strings.Builder
	changed := false
	copied := 0 // s[:copied] has been written to sb (when changed)
	emit := func(from, to int, repl string) {
		if !changed {
			changed = true
			sb.Grow(len(s) + 8)
		}
		sb.WriteString(s[copied:from])
		sb.WriteString(repl)
		copied = to
	}
	for i := 0; i < len(s); {
		// An ASCII rune followed by an ASCII byte (other than CR LF) is a cluster alone.
		if c := s[i]; c < utf8.RuneSelf && (i+1 == len(s) || (s[i+1] < utf8.RuneSelf && !(c == '\r' && s[i+1] == '\n'))) {
			if v := n.ascii[c]; v >= 0 {
				emit(i, i+1, n.replacement(v))
			}
			i++
			continue
		}
		g, _, _, _ := uniseg.FirstGraphemeClusterInString(s[i:], -1)
		if len(g) < 6 {
			if v := n.lookup(g); v >= 0 {
				emit(i, i+len(g), n.replacement(v))
				i += len(g)
				continue
			}
		}
		for j, r := range g {
			size := utf8.RuneLen(r)
			if v := n.lookup(g[j : j+size]); v >= 0 {
				emit(i+j, i+j+size, n.replacement(v))
			}
		}
		i += len(g)
	}
	if !changed {
		return s
	}
	sb.WriteString(s[copied:])
	return sb.String()
}

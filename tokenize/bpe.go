package tokenize

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// SubwordModel turns one pre-token into ids. Implementations are immutable after construction
// and safe for concurrent use.
type SubwordModel interface {
	// Tokenize appends the ids of word to dst.
	Tokenize(dst []uint32, word string) []uint32
	TokenToID(tok string) (uint32, bool)
	IDToToken(id uint32) (string, bool)
	// Size is the number of entries in the model vocabulary (HF's get_vocab_size without
	// added tokens); added tokens not in the vocabulary get ids from here on.
	Size() int
}

// tokenModel is a SubwordModel with what the Tokenizer needs beyond it.
type tokenModel interface {
	SubwordModel
	// idBound is the largest vocabulary id + 1 (ids may have gaps).
	idBound() int
	// resetCaches empties the per-word caches (cold-cache benchmarks).
	resetCaches()
}

// newModel builds the model tokenizer.json names: BPE (the default when "type" is
// missing, as in older files), WordPiece or Unigram.
func newModel(raw json.RawMessage) (tokenModel, error) {
	var c componentSpec
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	switch c.Type {
	case "", "BPE":
		return newBPE(raw)
	case "WordPiece":
		return newWordPiece(raw)
	case "Unigram":
		return newUnigram(raw)
	default:
		return nil, fmt.Errorf("model type %q is not supported (BPE, WordPiece, Unigram)", c.Type)
	}
}

// mergeInfo is what a merge rule yields: its rank (position in the merges list, lower
// applies first) and the id of the merged token.
type mergeInfo struct {
	rank  uint32
	newID uint32
}

func pairKey(a, b uint32) uint64 { return uint64(a)<<32 | uint64(b) }

// bpeModel is a byte-pair-encoding model with Hugging Face semantics: merges are applied
// lowest rank first, ties broken by the leftmost position; optional byte fallback
// (<0xNN> tokens), unknown-token fusing, ignore_merges and subword prefix/suffix.
type bpeModel struct {
	vocab  map[string]uint32
	vocabR []string
	hasID  []bool
	merges map[uint64]mergeInfo

	// runeID maps small runes straight to their single-character token id (-1: none),
	// used when there is no continuing-subword prefix or end-of-word suffix.
	runeID []int32

	unkID        int32 // -1: no unk token
	fuseUnk      bool
	byteFallback bool
	byteIDs      [256]int32 // id of <0xNN>, -1 if absent
	ignoreMerges bool
	prefix       string
	suffix       string

	cache   *wordCache
	scratch sync.Pool // *mergeScratch

	// Chunking at metaspace boundaries (SentencePiece-style vocabularies, whose whole
	// text reaches the model as one word): the word may be cut before a ▁ that follows a
	// rune X when no merge result contains "X▁" — then no merge can ever join the two
	// sides, the pieces evolve independently, and their results concatenate to the
	// whole word's. metaSplit enables it; metaUnsafe holds the X that do appear.
	metaSplit  bool
	metaUnsafe map[rune]bool

	// Byte-level input (deferred ByteLevel mapping): byteSym[b] is the id of the
	// byte-level rune of b, rawVocab maps raw byte strings to ids (for ignore_merges),
	// rawCache is keyed by raw bytes. byteLevelOK is false when some byte has no
	// single-rune token or a prefix/suffix is configured; then raw input is mapped and
	// takes the general path.
	byteLevelOK bool
	byteSym     [256]uint32
	rawVocab    map[string]uint32
	rawCache    *wordCache
}

// enableByteLevel prepares tokenizeByteLevel.
func (m *bpeModel) enableByteLevel() {
	m.byteLevelOK = m.prefix == "" && m.suffix == ""
	for b := 0; b < 256; b++ {
		id, ok := m.vocab[bytesUnicode.encoded[b]]
		if !ok {
			m.byteLevelOK = false
		}
		m.byteSym[b] = id
	}
	if !m.byteLevelOK {
		return
	}
	m.rawCache = newWordCache()
	if m.ignoreMerges {
		m.rawVocab = make(map[string]uint32, len(m.vocab))
		var buf []byte
		for tok, id := range m.vocab {
			buf = buf[:0]
			ok := true
			for _, r := range tok {
				b, in := bytesUnicode.toByte[r]
				if !in {
					ok = false
					break
				}
				buf = append(buf, b)
			}
			if ok {
				m.rawVocab[string(buf)] = id
			}
		}
	}
}

// tokenizeByteLevel tokenizes raw bytes as if they had been mapped through the GPT-2
// byte-level table first.
func (m *bpeModel) tokenizeByteLevel(dst []uint32, raw string) []uint32 {
	if raw == "" {
		return dst
	}
	if !m.byteLevelOK {
		return m.Tokenize(dst, bytesUnicode.encode(raw))
	}
	// The cache (small, hot) is consulted before the whole-word vocabulary lookup
	// (large, cold); both give the same answer. Caching is invisible in the result, so
	// the limit is applied to the raw length.
	cacheable := len(raw) < maxCachedWord
	if cacheable {
		if ids, ok := m.rawCache.get(raw); ok {
			return append(dst, ids...)
		}
	}
	if m.ignoreMerges {
		if id, ok := m.rawVocab[raw]; ok {
			if cacheable {
				m.rawCache.put(raw, []uint32{id})
			}
			return append(dst, id)
		}
	}
	sc, _ := m.scratch.Get().(*mergeScratch)
	if sc == nil {
		sc = new(mergeScratch)
	}
	syms := sc.syms[:0]
	for i := 0; i < len(raw); i++ {
		syms = append(syms, m.byteSym[raw[i]])
	}
	syms = m.mergeAll(sc, syms)
	start := len(dst)
	dst = append(dst, syms...)
	if cacheable {
		m.rawCache.put(raw, dst[start:])
	}
	sc.syms = syms[:0]
	m.scratch.Put(sc)
	return dst
}

type bpeSpec struct {
	Type                    string            `json:"type"`
	Dropout                 *float64          `json:"dropout"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	FuseUnk                 bool              `json:"fuse_unk"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Vocab                   map[string]uint32 `json:"vocab"`
	Merges                  json.RawMessage   `json:"merges"`
}

const runeIDLimit = 0x3000

func newBPE(raw json.RawMessage) (*bpeModel, error) {
	var spec bpeSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if spec.Type != "" && spec.Type != "BPE" {
		return nil, fmt.Errorf("model type %q is not supported (only BPE)", spec.Type)
	}
	if spec.Dropout != nil && *spec.Dropout != 0 {
		return nil, errors.New("model: BPE dropout is not supported (it is non-deterministic)")
	}
	m := &bpeModel{
		vocab:        spec.Vocab,
		merges:       make(map[uint64]mergeInfo),
		unkID:        -1,
		fuseUnk:      spec.FuseUnk,
		byteFallback: spec.ByteFallback,
		ignoreMerges: spec.IgnoreMerges,
		cache:        newWordCache(),
	}
	if spec.ContinuingSubwordPrefix != nil {
		m.prefix = *spec.ContinuingSubwordPrefix
	}
	if spec.EndOfWordSuffix != nil {
		m.suffix = *spec.EndOfWordSuffix
	}
	m.indexVocab()
	if spec.UnkToken != nil {
		id, ok := m.vocab[*spec.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model: unk_token %q is not in the vocabulary", *spec.UnkToken)
		}
		m.unkID = int32(id)
	}
	pairs, err := parseMerges(spec.Merges)
	if err != nil {
		return nil, err
	}
	for rank, p := range pairs {
		a, ok := m.vocab[p[0]]
		if !ok {
			return nil, fmt.Errorf("model: merge %d: token %q is not in the vocabulary", rank, p[0])
		}
		b, ok := m.vocab[p[1]]
		if !ok {
			return nil, fmt.Errorf("model: merge %d: token %q is not in the vocabulary", rank, p[1])
		}
		right := p[1]
		if m.prefix != "" {
			right = strings.TrimPrefix(right, m.prefix)
		}
		n, ok := m.vocab[p[0]+right]
		if !ok {
			return nil, fmt.Errorf("model: merge %d: result %q is not in the vocabulary", rank, p[0]+right)
		}
		// Later duplicates overwrite earlier ones, as a Rust HashMap collect does.
		m.merges[pairKey(a, b)] = mergeInfo{rank: uint32(rank), newID: n}
	}
	if _, ok := m.vocab[metaChar]; ok && m.prefix == "" && m.suffix == "" {
		m.metaSplit = true
		m.metaUnsafe = make(map[rune]bool)
		for _, p := range pairs {
			prev := rune(-1)
			for _, r := range p[0] + p[1] {
				if r == '▁' && prev >= 0 && prev != '▁' {
					m.metaUnsafe[prev] = true
				}
				prev = r
			}
		}
	}
	return m, nil
}

const metaChar = "▁"

// indexVocab derives the lookup tables of m.vocab: the id → token array, the ids of the
// <0xNN> byte-fallback tokens and the ids of single-rune tokens.
func (m *bpeModel) indexVocab() {
	maxID := -1
	for _, id := range m.vocab {
		maxID = max(maxID, int(id))
	}
	m.vocabR = make([]string, maxID+1)
	m.hasID = make([]bool, maxID+1)
	for tok, id := range m.vocab {
		m.vocabR[id] = tok
		m.hasID[id] = true
	}
	for b := 0; b < 256; b++ {
		m.byteIDs[b] = -1
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteIDs[b] = int32(id)
		}
	}
	m.runeID = make([]int32, runeIDLimit)
	for r := range m.runeID {
		m.runeID[r] = -1
		if id, ok := m.vocab[string(rune(r))]; ok && utf8.ValidRune(rune(r)) {
			m.runeID[r] = int32(id)
		}
	}
}

// parseMerges accepts both serializations: "a b" strings and [a, b] pairs.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var asPairs [][2]string
	if err := json.Unmarshal(raw, &asPairs); err == nil {
		return asPairs, nil
	}
	var asStrings []string
	if err := json.Unmarshal(raw, &asStrings); err != nil {
		return nil, fmt.Errorf("model: merges are neither strings nor pairs: %w", err)
	}
	out := make([][2]string, len(asStrings))
	for i, s := range asStrings {
		a, b, ok := strings.Cut(s, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("model: merge %d %q is not two tokens separated by a space", i, s)
		}
		out[i] = [2]string{a, b}
	}
	return out, nil
}

func (m *bpeModel) Size() int { return len(m.vocab) }

func (m *bpeModel) idBound() int { return len(m.vocabR) }

func (m *bpeModel) TokenToID(tok string) (uint32, bool) {
	id, ok := m.vocab[tok]
	return id, ok
}

func (m *bpeModel) IDToToken(id uint32) (string, bool) {
	if int(id) < len(m.vocabR) && m.hasID[id] {
		return m.vocabR[id], true
	}
	return "", false
}

// maxCachedWord matches HF: longer words are not cached.
const maxCachedWord = 256

func (m *bpeModel) Tokenize(dst []uint32, word string) []uint32 {
	if word == "" {
		return dst
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(dst, id)
		}
	}
	if !m.metaSplit {
		return m.tokenizeChunk(dst, word)
	}
	start, prev := 0, rune(-1)
	for i, r := range word {
		if r == '▁' && i > start && prev != '▁' && !m.metaUnsafe[prev] && m.isSingleToken(prev) {
			dst = m.tokenizeChunk(dst, word[start:i])
			start = i
		}
		prev = r
	}
	return m.tokenizeChunk(dst, word[start:])
}

// isSingleToken reports whether r on its own is a vocabulary entry (so its symbol is r,
// not a byte-fallback or unk token).
func (m *bpeModel) isSingleToken(r rune) bool {
	if r >= 0 && r < runeIDLimit {
		return m.runeID[r] >= 0
	}
	_, ok := m.vocab[string(r)]
	return ok
}

// tokenizeChunk runs merge_word on word (through the cache).
func (m *bpeModel) tokenizeChunk(dst []uint32, word string) []uint32 {
	cacheable := len(word) < maxCachedWord
	if cacheable {
		if ids, ok := m.cache.get(word); ok {
			return append(dst, ids...)
		}
	}
	sc, _ := m.scratch.Get().(*mergeScratch)
	if sc == nil {
		sc = new(mergeScratch)
	}
	syms := m.initialSymbols(sc.syms[:0], word)
	syms = m.mergeAll(sc, syms)
	start := len(dst)
	dst = append(dst, syms...)
	if cacheable {
		m.cache.put(word, dst[start:])
	}
	sc.syms = syms[:0]
	m.scratch.Put(sc)
	return dst
}

// initialSymbols splits word into characters and maps them to ids (HF merge_word before
// merging): unknown characters become byte-fallback tokens or (possibly fused) unk.
func (m *bpeModel) initialSymbols(syms []uint32, word string) []uint32 {
	plain := m.prefix == "" && m.suffix == ""
	unk, unkPending := uint32(0), false
	for i := 0; i < len(word); {
		r, size := rune(word[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(word[i:])
		}
		s := word[i : i+size]
		first, last := i == 0, i+size == len(word)
		i += size
		var id uint32
		found := false
		if plain && r < runeIDLimit {
			if v := m.runeID[r]; v >= 0 {
				id, found = uint32(v), true
			}
		} else {
			if !first && m.prefix != "" {
				s = m.prefix + s
			}
			if last && m.suffix != "" {
				s += m.suffix
			}
			id, found = m.vocab[s]
		}
		if found {
			if unkPending {
				syms = append(syms, unk)
				unkPending = false
			}
			syms = append(syms, id)
			continue
		}
		if m.byteFallback && m.allBytesKnown(s) {
			// HF does not flush a pending unk here; neither do we.
			for j := 0; j < len(s); j++ {
				syms = append(syms, uint32(m.byteIDs[s[j]]))
			}
			continue
		}
		if m.unkID >= 0 {
			if unkPending && !m.fuseUnk {
				syms = append(syms, unk)
			}
			unk, unkPending = uint32(m.unkID), true
		}
	}
	if unkPending {
		syms = append(syms, unk)
	}
	return syms
}

func (m *bpeModel) allBytesKnown(s string) bool {
	for j := 0; j < len(s); j++ {
		if m.byteIDs[s[j]] < 0 {
			return false
		}
	}
	return true
}

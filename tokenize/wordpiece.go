package tokenize

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// wordPieceModel is Hugging Face's WordPiece model (BERT and its descendants): each word
// is cut greedily into the longest vocabulary entries from the left, every piece after
// the first spelled with the continuing-subword prefix ("##"). A word longer than
// max_input_chars_per_word runes, or one with a position no entry matches, becomes the
// single unk token — the whole word, not only the part that failed.
type wordPieceModel struct {
	vocab    map[string]uint32
	vocabR   []string
	hasID    []bool
	unkID    uint32
	prefix   string
	maxChars int
	// maxLen is the longest entry in bytes: no match can be longer, so the search for
	// the longest match starts there instead of at the end of a long word.
	maxLen int
	cache  *wordCache
}

type wordPieceSpec struct {
	UnkToken                string            `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	MaxInputCharsPerWord    *int              `json:"max_input_chars_per_word"`
	Vocab                   map[string]uint32 `json:"vocab"`
}

func newWordPiece(raw json.RawMessage) (*wordPieceModel, error) {
	var spec wordPieceSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("model WordPiece: %w", err)
	}
	// HF's defaults, for files that leave the fields out.
	m := &wordPieceModel{vocab: spec.Vocab, prefix: "##", maxChars: 100, cache: newWordCache()}
	if spec.ContinuingSubwordPrefix != nil {
		m.prefix = *spec.ContinuingSubwordPrefix
	}
	if spec.MaxInputCharsPerWord != nil {
		m.maxChars = *spec.MaxInputCharsPerWord
	}
	if spec.UnkToken == "" {
		spec.UnkToken = "[UNK]"
	}
	unk, ok := m.vocab[spec.UnkToken]
	if !ok {
		return nil, fmt.Errorf("model WordPiece: unk_token %q is not in the vocabulary", spec.UnkToken)
	}
	m.unkID = unk
	maxID := -1
	for tok, id := range m.vocab {
		maxID = max(maxID, int(id))
		m.maxLen = max(m.maxLen, len(tok))
	}
	m.vocabR = make([]string, maxID+1)
	m.hasID = make([]bool, maxID+1)
	for tok, id := range m.vocab {
		m.vocabR[id] = tok
		m.hasID[id] = true
	}
	return m, nil
}

func (m *wordPieceModel) Size() int    { return len(m.vocab) }
func (m *wordPieceModel) idBound() int { return len(m.vocabR) }

func (m *wordPieceModel) TokenToID(tok string) (uint32, bool) {
	id, ok := m.vocab[tok]
	return id, ok
}

func (m *wordPieceModel) IDToToken(id uint32) (string, bool) {
	if int(id) < len(m.vocabR) && m.hasID[id] {
		return m.vocabR[id], true
	}
	return "", false
}

func (m *wordPieceModel) resetCaches() { m.cache.reset() }

// Tokenize appends the pieces of word. Words are cached: a pre-tokenized text repeats
// its words, and a hit skips the map probes of the search.
func (m *wordPieceModel) Tokenize(dst []uint32, word string) []uint32 {
	return m.cache.through(dst, word, m.pieces)
}

// pieces is the uncached greedy longest-match search.
func (m *wordPieceModel) pieces(dst []uint32, word string) []uint32 {
	if utf8.RuneCountInString(word) > m.maxChars {
		return append(dst, m.unkID)
	}
	n := len(dst)
	var buf []byte // prefix + candidate, reused across probes
	for start := 0; start < len(word); {
		end := min(len(word), start+m.maxLen)
		for end < len(word) && !utf8.RuneStart(word[end]) {
			end--
		}
		found := false
		for end > start {
			var id uint32
			var ok bool
			if start == 0 {
				id, ok = m.vocab[word[:end]]
			} else {
				buf = append(append(buf[:0], m.prefix...), word[start:end]...)
				id, ok = m.vocab[string(buf)] // no allocation: the conversion only keys the lookup
			}
			if ok {
				dst = append(dst, id)
				found = true
				break
			}
			_, size := utf8.DecodeLastRuneInString(word[start:end])
			end -= size
		}
		if !found {
			return append(dst[:n], m.unkID)
		}
		start = end
	}
	return dst
}

// wordPieceDecoder joins pieces back into words: a piece with the prefix is glued to the
// one before it (prefix removed), any other piece after the first gets a leading space.
// With cleanup, each resulting string then goes through HF's English detokenization
// rules (no space before . ? ! , and before n't 'm 's 've 're).
type wordPieceDecoder struct {
	prefix  string
	cleanup bool
}

func (d wordPieceDecoder) DecodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		if i > 0 {
			if rest, ok := strings.CutPrefix(t, d.prefix); ok {
				t = rest
			} else {
				t = " " + t
			}
		}
		if d.cleanup {
			t = cleanupTokenization(t)
		}
		out[i] = t
	}
	return out
}

// cleanupTokenization applies HF's cleanup rules one after the other, in their order: a
// strings.Replacer would apply them in one pass, which differs when one rule's output
// feeds another.
func cleanupTokenization(s string) string {
	rules := [...][2]string{
		{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
		{" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
	}
	for _, r := range rules {
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	return s
}

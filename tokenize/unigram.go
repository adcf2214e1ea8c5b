package tokenize

import (
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"unicode/utf8"
)

// unigramModel is Hugging Face's Unigram model (SentencePiece's unigram language model:
// T5, ALBERT, XLM-RoBERTa, multilingual-e5). A word is cut into the pieces whose summed
// log-probabilities are highest (Viterbi over every vocabulary entry that matches at
// every rune boundary). As in HF:
//
//   - every entry can match, control and special pieces included (added tokens are cut
//     out before the model sees the text, so this matters only for text that spells one);
//   - a rune where no one-rune entry starts gets an unk edge scored min_score − 10, so a
//     path always exists; ties keep the first path found (earlier start, shorter piece);
//   - consecutive unk pieces are fused into one, which becomes the unk id, or with
//     byte_fallback its <0xNN> byte tokens when all of them exist.
type unigramModel struct {
	pieces       []string
	scores       []float64
	ids          map[string]uint32
	trie         pieceTrie
	unkID        int32 // -1: none
	unkScore     float64
	byteFallback bool
	byteIDs      [256]int32 // id of <0xNN>, -1 if absent
	cache        *wordCache
	scratch      sync.Pool // *[]viterbiNode
}

// unkPenalty is HF's K_UNK_PENALTY: an unknown rune costs this much more than the
// rarest piece.
const unkPenalty = 10.0

func newUnigram(raw json.RawMessage) (*unigramModel, error) {
	var spec struct {
		UnkID        *int              `json:"unk_id"`
		Vocab        []json.RawMessage `json:"vocab"`
		ByteFallback bool              `json:"byte_fallback"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("model Unigram: %w", err)
	}
	m := &unigramModel{
		pieces:       make([]string, len(spec.Vocab)),
		scores:       make([]float64, len(spec.Vocab)),
		ids:          make(map[string]uint32, len(spec.Vocab)),
		unkID:        -1,
		byteFallback: spec.ByteFallback,
		cache:        newWordCache(),
	}
	minScore := math.Inf(1)
	var tb pieceTrieBuilder
	for i, entry := range spec.Vocab {
		var pair [2]json.RawMessage
		if err := json.Unmarshal(entry, &pair); err != nil {
			return nil, fmt.Errorf("model Unigram: vocab entry %d: %w", i, err)
		}
		if err := json.Unmarshal(pair[0], &m.pieces[i]); err != nil {
			return nil, fmt.Errorf("model Unigram: vocab entry %d piece: %w", i, err)
		}
		if err := json.Unmarshal(pair[1], &m.scores[i]); err != nil {
			return nil, fmt.Errorf("model Unigram: vocab entry %d score: %w", i, err)
		}
		// A later duplicate wins, as HF's HashMap insert does.
		m.ids[m.pieces[i]] = uint32(i)
		tb.insert(m.pieces[i], uint32(i))
		minScore = min(minScore, m.scores[i])
	}
	m.trie = tb.freeze()
	m.unkScore = minScore - unkPenalty
	if spec.UnkID != nil {
		if *spec.UnkID < 0 || *spec.UnkID >= len(m.pieces) {
			return nil, fmt.Errorf("model Unigram: unk_id %d is outside the vocabulary (%d pieces)", *spec.UnkID, len(m.pieces))
		}
		m.unkID = int32(*spec.UnkID)
	}
	for b := 0; b < 256; b++ {
		m.byteIDs[b] = -1
		if id, ok := m.ids[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteIDs[b] = int32(id)
		}
	}
	return m, nil
}

func (m *unigramModel) Size() int    { return len(m.pieces) }
func (m *unigramModel) idBound() int { return len(m.pieces) }
func (m *unigramModel) resetCaches() { m.cache.reset() }

func (m *unigramModel) TokenToID(tok string) (uint32, bool) {
	id, ok := m.ids[tok]
	return id, ok
}

func (m *unigramModel) IDToToken(id uint32) (string, bool) {
	if int(id) < len(m.pieces) {
		return m.pieces[id], true
	}
	return "", false
}

// Tokenize appends the ids of word's best segmentation; words are cached.
func (m *unigramModel) Tokenize(dst []uint32, word string) []uint32 {
	return m.cache.through(dst, word, m.viterbi)
}

// viterbiNode is the best path ending at one byte position: its score, where its last
// piece starts (-1: no path yet) and that piece's id (the unk id for an unk edge).
type viterbiNode struct {
	score float64
	start int32
	id    int32
}

func (m *unigramModel) viterbi(dst []uint32, word string) []uint32 {
	bp, _ := m.scratch.Get().(*[]viterbiNode)
	if bp == nil {
		bp = new([]viterbiNode)
	}
	best := (*bp)[:0]
	for range len(word) + 1 {
		best = append(best, viterbiNode{start: -1})
	}
	best[0].start = 0
	for start := 0; start < len(word); {
		_, runeLen := utf8.DecodeRuneInString(word[start:])
		base := best[start].score
		single := false
		m.trie.walk(word[start:], func(length int, id uint32) {
			end := start + length
			if s := base + m.scores[id]; best[end].start < 0 || s > best[end].score {
				best[end] = viterbiNode{score: s, start: int32(start), id: int32(id)}
			}
			if length == runeLen {
				single = true
			}
		})
		if !single {
			end := start + runeLen
			if s := base + m.unkScore; best[end].start < 0 || s > best[end].score {
				best[end] = viterbiNode{score: s, start: int32(start), id: m.unkID}
			}
		}
		start += runeLen
	}
	// Walk back from the end, collecting pieces in reverse; unk runs are fused.
	n := len(dst)
	for end := len(word); end > 0; {
		node := best[end]
		start := int(node.start)
		// Unk edges carry unkID (-1 when the model has none, which HF reports as an
		// error; here the run becomes id 0 rather than failing the whole text).
		if node.id == m.unkID {
			for start > 0 && best[start].id == m.unkID {
				start = int(best[start].start)
			}
			dst = m.appendUnknownReversed(dst, word[start:end])
		} else {
			dst = append(dst, uint32(node.id))
		}
		end = start
	}
	for i, j := n, len(dst)-1; i < j; i, j = i+1, j-1 {
		dst[i], dst[j] = dst[j], dst[i]
	}
	// A lattice for a very long word is not kept: a pooled buffer would hold its memory
	// for as long as the pool keeps it (the same bound as the pre-tokenizer's scratch).
	if cap(best) <= 1<<14 {
		*bp = best
		m.scratch.Put(bp)
	}
	return dst
}

// appendUnknownReversed appends, in reverse order, the ids of a fused run of unknown
// runes: the piece itself if the vocabulary has it, else its <0xNN> byte tokens when
// byte_fallback is on and all of them exist, else the unk id.
func (m *unigramModel) appendUnknownReversed(dst []uint32, s string) []uint32 {
	if id, ok := m.ids[s]; ok {
		return append(dst, id)
	}
	if m.byteFallback {
		all := true
		for i := 0; i < len(s); i++ {
			if m.byteIDs[s[i]] < 0 {
				all = false
				break
			}
		}
		if all {
			for i := len(s) - 1; i >= 0; i-- {
				dst = append(dst, uint32(m.byteIDs[s[i]]))
			}
			return dst
		}
	}
	return append(dst, uint32(max(m.unkID, 0)))
}

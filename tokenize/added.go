package tokenize

import (
	"encoding/json"
	"fmt"
	"sort"
	"unicode"
	"unicode/utf8"
)

// AddedToken is a token added on top of the model vocabulary (special tokens such as
// "<|begin_of_text|>", or extra tokens). Added tokens are cut out of the text before
// normalization and pre-tokenization, so they are never split.
type AddedToken struct {
	ID         uint32
	Content    string
	Special    bool
	LStrip     bool
	RStrip     bool
	SingleWord bool
	Normalized bool
}

type addedTokenSpec struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedVocab holds the added tokens and two matchers: one for tokens matched on the raw
// text (normalized=false) and one for tokens matched on normalized text.
type addedVocab struct {
	tokens    []AddedToken // sorted by id
	byID      map[uint32]int
	byContent map[string]uint32
	// decodeForm is the string an added token decodes from: its normalized form when it
	// is matched on normalized text and the normalizer changes it, else its content.
	decodeForm map[uint32]string
	raw        *tokenTrie
	norm       *tokenTrie
	// rawPlain and normPlain match the non-special tokens only: they split
	// text whose special tokens must stay text (HF's split_special_tokens).
	rawPlain  *tokenTrie
	normPlain *tokenTrie
	// idMismatches counts tokens whose id in the file differs from the one HF assigns
	// (HF only warns; the assigned id is the one used).
	idMismatches int
}

// newAddedVocab assigns ids the way HF does when it loads tokenizer.json: a token already
// in the model vocabulary keeps that id; any other gets the next id after the vocabulary
// (or after the largest added id). The ids written in the file are only compared.
func newAddedVocab(raw json.RawMessage, model SubwordModel, norm Normalizer) (*addedVocab, error) {
	var specs []addedTokenSpec
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &specs); err != nil {
			return nil, fmt.Errorf("added_tokens: %w", err)
		}
	}
	byContent := make(map[string]uint32)
	mismatches := 0
	next := uint32(model.Size())
	tokens := make(map[uint32]AddedToken)
	for _, s := range specs {
		if s.Content == "" {
			continue
		}
		t := AddedToken{Content: s.Content, Special: s.Special, LStrip: s.LStrip, RStrip: s.RStrip,
			SingleWord: s.SingleWord, Normalized: s.Normalized}
		if id, ok := byContent[s.Content]; ok {
			t.ID = id
		} else if id, ok := model.TokenToID(s.Content); ok {
			t.ID = id
		} else {
			t.ID = next
			next++
		}
		if t.ID != s.ID {
			mismatches++
		}
		byContent[s.Content] = t.ID
		tokens[t.ID] = t
	}
	av := indexAddedTokens(tokens, norm)
	av.idMismatches = mismatches
	return av, nil
}

// indexAddedTokens builds the added vocabulary of tokens whose ids are already assigned
// (by id; a token's Content is unique).
func indexAddedTokens(tokens map[uint32]AddedToken, norm Normalizer) *addedVocab {
	av := &addedVocab{
		byID:       make(map[uint32]int),
		byContent:  make(map[string]uint32, len(tokens)),
		decodeForm: make(map[uint32]string),
	}
	var rawPats, normPats, rawPlain, normPlain []triePattern
	for id, t := range tokens {
		av.tokens = append(av.tokens, t)
		av.byContent[t.Content] = id
		pat, normalized := t.Content, t.Normalized
		if normalized && norm != nil {
			pat = norm.Normalize(t.Content)
			if pat != t.Content {
				av.decodeForm[id] = pat
			}
		}
		switch {
		case normalized:
			normPats = append(normPats, triePattern{pat, id})
			if !t.Special {
				normPlain = append(normPlain, triePattern{pat, id})
			}
		default:
			rawPats = append(rawPats, triePattern{pat, id})
			if !t.Special {
				rawPlain = append(rawPlain, triePattern{pat, id})
			}
		}
	}
	sort.Slice(av.tokens, func(i, j int) bool { return av.tokens[i].ID < av.tokens[j].ID })
	for i, t := range av.tokens {
		av.byID[t.ID] = i
	}
	av.raw = newTokenTrie(rawPats)
	av.norm = newTokenTrie(normPats)
	av.rawPlain = newTokenTrie(rawPlain)
	av.normPlain = newTokenTrie(normPlain)
	return av
}

func (av *addedVocab) token(id uint32) (AddedToken, bool) {
	i, ok := av.byID[id]
	if !ok {
		return AddedToken{}, false
	}
	return av.tokens[i], true
}

// segment is a piece of the input: either an added token (id >= 0) or text to tokenize.
type segment struct {
	text string
	id   int64 // -1 for text
	// atStart reports whether the piece begins at offset 0 of the input (Metaspace's
	// prepend_scheme "first" needs it).
	atStart bool
	// literal reports that the piece holds text whose special tokens must
	// not be recognised (see Tokenizer.EncodeWithLiteralSpans).
	literal bool
}

// split cuts text into segments at the added tokens found by trie, honouring lstrip,
// rstrip and single_word (HF AddedVocabulary::find_matches).
func (av *addedVocab) split(dst []segment, text string, atStart bool, trie *tokenTrie) []segment {
	if trie == nil || text == "" {
		return append(dst, segment{text: text, id: -1, atStart: atStart})
	}
	startOffset := 0
	for pos := 0; pos < len(text); {
		start, end, id, ok := trie.find(text, pos)
		if !ok {
			break
		}
		pos = end
		t, _ := av.token(id)
		if t.SingleWord {
			startSpace := start == 0 || !endsWithWord(text[:start])
			stopSpace := end == len(text) || !startsWithWord(text[end:])
			if !startSpace || !stopSpace {
				// HF's matcher resumes after the discarded match.
				continue
			}
		}
		if t.LStrip {
			start = max(trailingSpaceStart(text[:start]), startOffset)
		}
		if t.RStrip {
			end += leadingSpaceLen(text[end:])
		}
		if start > startOffset {
			dst = append(dst, segment{text: text[startOffset:start], id: -1, atStart: atStart && startOffset == 0})
		}
		dst = append(dst, segment{text: text[start:end], id: int64(id)})
		startOffset = end
	}
	if startOffset < len(text) {
		dst = append(dst, segment{text: text[startOffset:], id: -1, atStart: atStart && startOffset == 0})
	}
	return dst
}

func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) ||
		unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Pc, r) || r == 0x200C || r == 0x200D
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordRune(r)
}

func trailingSpaceStart(s string) int {
	i := len(s)
	for i > 0 {
		r, size := utf8.DecodeLastRuneInString(s[:i])
		if !unicode.IsSpace(r) {
			break
		}
		i -= size
	}
	return i
}

func leadingSpaceLen(s string) int {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			break
		}
		i += size
	}
	return i
}

// tokenTrie finds added tokens with leftmost-longest semantics: the match that starts
// earliest wins, and among those the longest. A byte trie plus a first-byte filter keeps
// the scan near one table lookup per input byte.
type tokenTrie struct {
	first [256]bool
	// edges maps node<<8|byte to the child node; node 0 is the root.
	edges map[uint64]int32
	// term[node] is the id of the token ending at node, or -1.
	term []int64
}

type triePattern struct {
	s  string
	id uint32
}

func newTokenTrie(pats []triePattern) *tokenTrie {
	if len(pats) == 0 {
		return nil
	}
	t := &tokenTrie{edges: make(map[uint64]int32), term: []int64{-1}}
	for _, p := range pats {
		if p.s == "" {
			continue
		}
		t.first[p.s[0]] = true
		node := int32(0)
		for i := 0; i < len(p.s); i++ {
			k := uint64(node)<<8 | uint64(p.s[i])
			child, ok := t.edges[k]
			if !ok {
				child = int32(len(t.term))
				t.term = append(t.term, -1)
				t.edges[k] = child
			}
			node = child
		}
		t.term[node] = int64(p.id)
	}
	return t
}

// find returns the leftmost-longest match starting at or after pos.
func (t *tokenTrie) find(s string, pos int) (start, end int, id uint32, ok bool) {
	for i := pos; i < len(s); i++ {
		if !t.first[s[i]] {
			continue
		}
		node, best := int32(0), -1
		var bestID int64
		for j := i; j < len(s); j++ {
			child, found := t.edges[uint64(node)<<8|uint64(s[j])]
			if !found {
				break
			}
			node = child
			if t.term[node] >= 0 {
				best, bestID = j+1, t.term[node]
			}
		}
		if best >= 0 {
			return i, best, uint32(bestID), true
		}
	}
	return 0, 0, 0, false
}

package cache

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// AddedToken describes one added token of the tokenizer. Its fields mirror
// tokenize.AddedToken one for one, so a caller converts with
// cache.AddedToken(t) without this package importing the tokenizer.
type AddedToken struct {
	ID         uint32
	Content    string
	Special    bool
	LStrip     bool
	RStrip     bool
	SingleWord bool
	Normalized bool
}

// scanner finds added-token occurrences in raw text the way a Hugging Face
// tokenizer does before normalization: leftmost-longest over the added tokens
// that are matched on the raw text (normalized == false). Boundaries are the
// end offsets of occurrences of eligible tokens (see eligible).
type scanner struct {
	nodes     []trieNode
	root      [256]int32 // root edges by first byte; 0 = none
	sorted    []string   // every added token's content, sorted, for the crossing check
	maxLen    int        // longest added token in bytes
	eligible  int        // number of eligible boundary tokens
	onlyFirst int        // the first byte of every raw token if they share one, else -1
}

type trieNode struct {
	edges    []trieEdge
	tok      int32 // index+1 of the token ending here (0 = none)
	boundary bool  // the token ending here is an eligible boundary
}

type trieEdge struct {
	b     byte
	child int32
}

// eligible reports whether a token may end an L1 boundary prefix: a special
// token matched on raw text that never swallows or depends on its neighbours.
func eligible(t AddedToken) bool {
	if !t.Special || t.Normalized || t.LStrip || t.RStrip || t.SingleWord || t.Content == "" {
		return false
	}
	first, _ := utf8.DecodeRuneInString(t.Content)
	last, _ := utf8.DecodeLastRuneInString(t.Content)
	return !unicode.IsSpace(first) && !unicode.IsSpace(last)
}

func newScanner(tokens []AddedToken) *scanner {
	s := &scanner{nodes: make([]trieNode, 1)}
	for i, t := range tokens {
		if t.Content == "" {
			continue
		}
		s.sorted = append(s.sorted, t.Content)
		s.maxLen = max(s.maxLen, len(t.Content))
		if t.Normalized {
			continue // matched after normalization, inside a raw segment: never splits raw text
		}
		n := s.insert(t.Content)
		if s.nodes[n].tok == 0 {
			s.nodes[n].tok = int32(i + 1)
			s.nodes[n].boundary = eligible(t)
		} else if !eligible(t) {
			// Same content listed twice: only a boundary if every listing is.
			s.nodes[n].boundary = false
		}
	}
	for i := range s.nodes {
		if s.nodes[i].boundary {
			s.eligible++
		}
	}
	s.onlyFirst = -1
	for b, n := range s.root {
		if n == 0 {
			continue
		}
		if s.onlyFirst >= 0 {
			s.onlyFirst = -1
			break
		}
		s.onlyFirst = b
	}
	sort.Strings(s.sorted)
	return s
}

func (s *scanner) insert(content string) int32 {
	var n int32
	for i := 0; i < len(content); i++ {
		b := content[i]
		next := int32(0)
		if n == 0 {
			next = s.root[b]
		} else {
			for _, e := range s.nodes[n].edges {
				if e.b == b {
					next = e.child
					break
				}
			}
		}
		if next == 0 {
			s.nodes = append(s.nodes, trieNode{})
			next = int32(len(s.nodes) - 1)
			if n == 0 {
				s.root[b] = next
			} else {
				s.nodes[n].edges = append(s.nodes[n].edges, trieEdge{b, next})
			}
		}
		n = next
	}
	return n
}

// longest returns the end offset of the longest added token starting at i in
// text, and whether that token is an eligible boundary; end == 0 if none.
func (s *scanner) longest(text string, i int) (end int, boundary bool) {
	n := s.root[text[i]]
	for j := i + 1; n != 0; j++ {
		if s.nodes[n].tok != 0 {
			end, boundary = j, s.nodes[n].boundary
		}
		if j == len(text) {
			break
		}
		b, next := text[j], int32(0)
		for _, e := range s.nodes[n].edges {
			if e.b == b {
				next = e.child
				break
			}
		}
		n = next
	}
	return end, boundary
}

// boundaries appends to dst the end offsets of the eligible boundary tokens
// found in text, in increasing order.
func (s *scanner) boundaries(dst []int, text string) []int {
	if s.eligible == 0 {
		return dst
	}
	for i := 0; i < len(text); {
		if s.onlyFirst >= 0 {
			// Every token starts with the same byte ('<' in all the reference
			// tokenizers but Gemma's): jump to its next occurrence.
			j := strings.IndexByte(text[i:], byte(s.onlyFirst))
			if j < 0 {
				break
			}
			i += j
		} else if s.root[text[i]] == 0 {
			i++
			continue
		}
		end, boundary := s.longest(text, i)
		if end == 0 {
			i++
			continue
		}
		if boundary {
			dst = append(dst, end)
		}
		i = end
	}
	return dst
}

// crossing reports whether some suffix of prefix is a proper prefix of an
// added token. If so, text appended after prefix could complete that token and
// move the split, so prefix must not be cached as a boundary prefix.
func (s *scanner) crossing(prefix string) bool {
	for k := 1; k < s.maxLen && k <= len(prefix); k++ {
		suf := prefix[len(prefix)-k:]
		i := sort.SearchStrings(s.sorted, suf)
		// Every token with prefix suf sorts at or after suf; the first one
		// that is longer than suf and starts with it is found by skipping an
		// exact match.
		for ; i < len(s.sorted) && strings.HasPrefix(s.sorted[i], suf); i++ {
			if len(s.sorted[i]) > k {
				return true
			}
		}
	}
	return false
}

// singleWord reports whether a raw-matched added token has single_word set:
// whether it matches then depends on the characters around it, including
// ones after a boundary, which the scan does not model.
func (s *scanner) singleWord(tokens []AddedToken) bool {
	for _, t := range tokens {
		if t.SingleWord && !t.Normalized {
			return true
		}
	}
	return false
}

package tokenize

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// preToken is a piece of normalized text on its way to the model.
type preToken struct {
	s string
	// atStart: the piece begins at offset 0 of the original input.
	atStart bool
	// byteLevel: s holds raw bytes that the model must read through the GPT-2 byte-level
	// table (deferred ByteLevel mapping).
	byteLevel bool
}

// PreTokenizer splits a normalized piece of text into pre-tokens (words) that the model
// encodes independently. It may also rewrite them (ByteLevel maps bytes to runes).
type PreTokenizer interface {
	PreTokenize(dst []preToken, p preToken, sc *scratch) []preToken
}

// scratch holds buffers reused across the pre-tokenization of one Encode call.
type scratch struct {
	matches [][2]int
	spans   []span
	out     []span
	free    [][]preToken
	segs    []segment
	nsegs   []segment
	pre     []preToken
}

func (sc *scratch) takeBuf() []preToken {
	if n := len(sc.free); n > 0 {
		b := sc.free[n-1]
		sc.free = sc.free[:n-1]
		return b[:0]
	}
	return nil
}

func (sc *scratch) putBuf(b []preToken) { sc.free = append(sc.free, b) }

// scratchKeep is the largest buffer, in elements, that a pooled scratch keeps.
const scratchKeep = 1 << 14

// release drops references into the caller's text, so a pooled scratch does not keep
// a large input alive, and frees buffers that grew unusually large.
func (sc *scratch) release() {
	const keep = scratchKeep
	clearOrDrop(&sc.segs, keep)
	clearOrDrop(&sc.nsegs, keep)
	clearOrDrop(&sc.pre, keep)
	for i := range sc.free {
		clearOrDrop(&sc.free[i], keep)
	}
	if cap(sc.matches) > keep {
		sc.matches = nil
	}
}

// reserve returns s emptied, with room for at least n elements. The pre-token buffers start
// empty in a new tokenizer's scratch, and again after release dropped them for a long input;
// sizing them once from the text's length saves a cold 64 KB encode of prose, code or JSON
// about half of the 5-15 MB that growing them by doubling allocated (BenchmarkColdText;
// BENCHMARKS.md, the cold tokenizer section).
func reserve[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, 0, n)
	}
	return s[:0]
}

// preTokenGuess estimates the pre-tokens of n bytes of text: about one per four bytes of
// prose (code and JSON have more, CJK text far fewer), at most what release keeps, so that a
// reserved buffer stays in the pool. A guess too small only means the buffer grows as before.
func preTokenGuess(n int) int { return min(n/4+8, scratchKeep) }

func clearOrDrop[T any](s *[]T, keep int) {
	if cap(*s) > keep {
		*s = nil
		return
	}
	clear((*s)[:cap(*s)])
	*s = (*s)[:0]
}

func newPreTokenizer(raw json.RawMessage) (PreTokenizer, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c componentSpec
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch c.Type {
	case "Sequence":
		var s struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Sequence: %w", err)
		}
		var seq sequencePreTokenizer
		for _, r := range s.PreTokenizers {
			p, err := newPreTokenizer(r)
			if err != nil {
				return nil, err
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		return seq, nil
	case "Split":
		var s struct {
			Pattern  patternSpec `json:"pattern"`
			Behavior string      `json:"behavior"`
			Invert   bool        `json:"invert"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		m, err := newPatternMatcher(s.Pattern)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		b, err := parseBehavior(s.Behavior)
		if err != nil {
			return nil, err
		}
		sp := splitPreTokenizer{m: m, behavior: b, invert: s.Invert}
		if s.Pattern.Regex != nil {
			sp.cut = regexCut(*s.Pattern.Regex, b, s.Invert)
		}
		return sp, nil
	case "ByteLevel":
		var s struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("pre_tokenizer ByteLevel: %w", err)
		}
		return byteLevelPreTokenizer{addPrefixSpace: s.AddPrefixSpace, useRegex: s.UseRegex == nil || *s.UseRegex}, nil
	case "Metaspace":
		var s struct {
			Replacement    string `json:"replacement"`
			PrependScheme  string `json:"prepend_scheme"`
			AddPrefixSpace *bool  `json:"add_prefix_space"`
			Split          *bool  `json:"split"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Metaspace: %w", err)
		}
		r, _ := utf8.DecodeRuneInString(s.Replacement)
		if s.Replacement == "" {
			r = '▁'
		}
		scheme := s.PrependScheme
		if scheme == "" {
			scheme = "always"
			if s.AddPrefixSpace != nil && !*s.AddPrefixSpace {
				scheme = "never"
			}
		}
		return metaspace{replacement: r, scheme: scheme, split: s.Split == nil || *s.Split}, nil
	case "Digits":
		var s struct {
			Individual bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Digits: %w", err)
		}
		b := behaviorContiguous
		if s.Individual {
			b = behaviorIsolated
		}
		return splitPreTokenizer{m: runeMatcher(unicode.IsNumber), behavior: b, cut: cutUntouched}, nil
	case "Punctuation":
		var s struct {
			Behavior string `json:"behavior"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Punctuation: %w", err)
		}
		if s.Behavior == "" {
			s.Behavior = "Isolated"
		}
		b, err := parseBehavior(s.Behavior)
		if err != nil {
			return nil, err
		}
		return splitPreTokenizer{m: runeMatcher(isPunctuation), behavior: b, cut: cutUntouched}, nil
	case "WhitespaceSplit":
		return splitPreTokenizer{m: runeMatcher(unicode.IsSpace), behavior: behaviorRemoved, cut: cutSplits}, nil
	case "Whitespace":
		m, err := newFallbackMatcher(`\w+|[^\w\s]+`)
		if err != nil {
			return nil, err
		}
		return splitPreTokenizer{m: m, behavior: behaviorRemoved, invert: true, cut: cutSplits}, nil
	case "BertPreTokenizer":
		return sequencePreTokenizer{
			splitPreTokenizer{m: runeMatcher(unicode.IsSpace), behavior: behaviorRemoved, cut: cutSplits},
			splitPreTokenizer{m: runeMatcher(isPunctuation), behavior: behaviorIsolated},
		}, nil
	default:
		return nil, fmt.Errorf("pre_tokenizer type %q is not supported", c.Type)
	}
}

func isPunctuation(r rune) bool {
	return (r < 128 && (unicode.IsPunct(r) || unicode.IsSymbol(r))) || unicode.IsPunct(r)
}

type sequencePreTokenizer []PreTokenizer

func (seq sequencePreTokenizer) PreTokenize(dst []preToken, p preToken, sc *scratch) []preToken {
	guess := preTokenGuess(len(p.s))
	cur := append(reserve(sc.takeBuf(), guess), p)
	next := reserve(sc.takeBuf(), guess)
	for _, pt := range seq {
		next = next[:0]
		for _, c := range cur {
			next = pt.PreTokenize(next, c, sc)
		}
		cur, next = next, cur
	}
	dst = append(dst, cur...)
	sc.putBuf(cur)
	sc.putBuf(next)
	return dst
}

type splitBehavior int

const (
	behaviorRemoved splitBehavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

func parseBehavior(s string) (splitBehavior, error) {
	switch s {
	case "Removed":
		return behaviorRemoved, nil
	case "Isolated":
		return behaviorIsolated, nil
	case "MergedWithPrevious":
		return behaviorMergedWithPrevious, nil
	case "MergedWithNext":
		return behaviorMergedWithNext, nil
	case "Contiguous":
		return behaviorContiguous, nil
	}
	return 0, fmt.Errorf("split behavior %q is not supported", s)
}

// runeMatcher matches every rune satisfying a predicate, each rune a match of its own
// (HF's char-predicate Pattern).
type runeMatcher func(rune) bool

func (f runeMatcher) FindAll(s string, dst [][2]int) [][2]int {
	for i, r := range s {
		if f(r) {
			dst = append(dst, [2]int{i, i + utf8.RuneLen(r)})
		}
	}
	return dst
}

type splitPreTokenizer struct {
	m        matcher
	behavior splitBehavior
	invert   bool
	// cut says whether text may be pre-tokenized in windows around this
	// step (see cutSafe).
	cut cutKind
}

type span struct {
	start, end int
	match      bool
}

func (sp splitPreTokenizer) PreTokenize(dst []preToken, p preToken, sc *scratch) []preToken {
	return splitBy(dst, p, sp.m, sp.behavior, sp.invert, sc)
}

// splitBy is HF NormalizedString::split: the text is cut into matches and the gaps
// between them, and the behavior decides what becomes of the matches. Empty pieces are
// dropped.
func splitBy(dst []preToken, p preToken, m matcher, behavior splitBehavior, invert bool, sc *scratch) []preToken {
	if p.s == "" {
		return dst
	}
	matches := m.FindAll(p.s, reserve(sc.matches, preTokenGuess(len(p.s))))
	sc.matches = matches[:0]
	emit := func(start, end int) {
		if end > start {
			dst = append(dst, preToken{s: p.s[start:end], atStart: p.atStart && start == 0, byteLevel: p.byteLevel})
		}
	}
	if behavior == behaviorIsolated {
		prev := 0
		for _, mt := range matches {
			emit(prev, mt[0])
			emit(mt[0], mt[1])
			prev = mt[1]
		}
		emit(prev, len(p.s))
		return dst
	}
	spans := reserve(sc.spans, 2*len(matches)+1)
	prev := 0
	for _, mt := range matches {
		if mt[0] > prev {
			spans = append(spans, span{prev, mt[0], invert})
		}
		spans = append(spans, span{mt[0], mt[1], !invert})
		prev = mt[1]
	}
	if prev < len(p.s) {
		spans = append(spans, span{prev, len(p.s), invert})
	}
	sc.spans = spans[:0]
	out := reserve(sc.out, len(spans))
	switch behavior {
	case behaviorRemoved:
		for _, s := range spans {
			if !s.match {
				out = append(out, s)
			}
		}
	case behaviorContiguous:
		prevMatch := false
		for _, s := range spans {
			if len(out) > 0 && s.match == prevMatch {
				out[len(out)-1].end = s.end
			} else {
				out = append(out, s)
			}
			prevMatch = s.match
		}
	case behaviorMergedWithPrevious:
		prevMatch := false
		for _, s := range spans {
			if s.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = s.end
			} else {
				out = append(out, s)
			}
			prevMatch = s.match
		}
	case behaviorMergedWithNext:
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			s := spans[i]
			if s.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].start = s.start
			} else {
				out = append(out, s)
			}
			prevMatch = s.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	sc.out = out[:0]
	for _, s := range out {
		emit(s.start, s.end)
	}
	return dst
}

// byteLevelPreTokenizer optionally prepends a space, optionally splits with the GPT-2
// pattern, and maps every byte to its byte-level rune. When it is the last step of the
// pre-tokenization, the mapping is deferred: pieces are marked byteLevel and the model
// reads their raw bytes directly, which saves building a mapped copy of every word.
type byteLevelPreTokenizer struct {
	addPrefixSpace bool
	useRegex       bool
	deferMapping   bool
}

func (b byteLevelPreTokenizer) PreTokenize(dst []preToken, p preToken, sc *scratch) []preToken {
	if p.s == "" {
		return dst
	}
	s := p.s
	if b.addPrefixSpace && !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	start := len(dst)
	if b.useRegex {
		dst = splitBy(dst, preToken{s: s, atStart: p.atStart}, scanMatcher{scan: scanGPT2}, behaviorIsolated, false, sc)
	} else {
		dst = append(dst, preToken{s: s, atStart: p.atStart})
	}
	for i := start; i < len(dst); i++ {
		if b.deferMapping {
			dst[i].byteLevel = true
		} else {
			dst[i].s = bytesUnicode.encode(dst[i].s)
		}
	}
	return dst
}

// deferByteLevel turns on deferred mapping for a ByteLevel step that ends the
// pre-tokenization (alone or last in a sequence).
func deferByteLevel(pt PreTokenizer) PreTokenizer {
	switch v := pt.(type) {
	case byteLevelPreTokenizer:
		v.deferMapping = true
		return v
	case sequencePreTokenizer:
		if n := len(v); n > 0 {
			out := append(sequencePreTokenizer(nil), v...)
			out[n-1] = deferByteLevel(v[n-1])
			return out
		}
	}
	return pt
}

// metaspace replaces spaces with ▁, optionally prepends one, and splits before each ▁.
type metaspace struct {
	replacement rune
	scheme      string // always | first | never
	split       bool
}

func (m metaspace) PreTokenize(dst []preToken, p preToken, sc *scratch) []preToken {
	if p.s == "" {
		return dst
	}
	rep := string(m.replacement)
	s := strings.ReplaceAll(p.s, " ", rep)
	switch m.scheme {
	case "always":
		if !strings.HasPrefix(s, rep) {
			s = rep + s
		}
	case "first":
		if !strings.HasPrefix(s, rep) && p.atStart {
			s = rep + s
		}
	}
	if !m.split {
		return append(dst, preToken{s: s, atStart: p.atStart})
	}
	return splitBy(dst, preToken{s: s, atStart: p.atStart}, literalMatcher{rep}, behaviorMergedWithNext, false, sc)
}

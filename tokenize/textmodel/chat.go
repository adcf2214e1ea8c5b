package textmodel

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvgate/kvgate/tokenize"
	"github.com/kvgate/kvgate/tokenize/cache"
	"github.com/kvgate/kvgate/tokenize/template"
)

// ErrProtectedTextAltered is returned (wrapped) by EncodeChat, with
// SplitSpecialTokensInContent on, when the chat template cut or escaped a
// piece of client text that holds special-token text, so that the piece can
// no longer be told apart from the template's own text.
var ErrProtectedTextAltered = errors.New("the chat template altered client text that holds special-token text")

// maxProtectDepth bounds the walk over client values; DecodeJSON already
// holds client JSON to template.MaxJSONDepth.
const maxProtectDepth = 1000

// EncodeChat renders c with the chat template and tokenizes the result
// without adding special tokens (the template writes them), using the caches
// for lookups; like EncodeDeferred, it caches only when commit is called.
//
// With Options.SplitSpecialTokensInContent off, the ids are exactly those of
// Encode(Render(c), false). With it on, special-token text that came from
// the client (anywhere in the messages, tools or kwargs: contents, names,
// reasoning_content, tool-call arguments) is tokenized as ordinary text,
// while the template's own special tokens stay control tokens; a
// conversation without such text still gets Encode(Render(c), false)'s ids.
// Template errors are Render's (raise_exception still wraps
// template.ErrTemplateRaised).
func (m *Model) EncodeChat(c Conversation) (ids []uint32, commit func(), err error) {
	ids, commit, _, err = m.EncodeChatLookup(c)
	return ids, commit, err
}

// EncodeChatLookup is EncodeChat that also says how the caches served the
// prompt, for a request's trace.
func (m *Model) EncodeChatLookup(c Conversation) (ids []uint32, commit func(), lk cache.Lookup, err error) {
	return m.EncodeChatLimit(c, 0)
}

// EncodeChatLimit is EncodeChatLookup that tokenizes a long rendered
// prompt only until it has more than maxTokens tokens (0: no limit), as
// EncodeDeferredLimit does, with an error wrapping tokenize.ErrTooManyTokens.
func (m *Model) EncodeChatLimit(c Conversation, maxTokens int) (ids []uint32, commit func(), lk cache.Lookup, err error) {
	noCommit := func() {}
	if !m.splitContent {
		text, err := m.Render(c)
		if err != nil {
			return nil, noCommit, lk, err
		}
		return m.EncodeDeferredLimit(text, false, maxTokens)
	}
	p, err := newProtector(m.specialTexts)
	if err != nil {
		return nil, noCommit, lk, err
	}
	pc := c
	if pc.Messages, err = p.protectList(c.Messages, 0); err != nil {
		return nil, noCommit, lk, err
	}
	if pc.Tools, err = p.protectList(c.Tools, 0); err != nil {
		return nil, noCommit, lk, err
	}
	if c.Kwargs != nil {
		kw, err := p.protect(c.Kwargs, 0)
		if err != nil {
			return nil, noCommit, lk, err
		}
		pc.Kwargs = kw.(*template.OrderedMap)
	}
	rendered, err := m.Render(pc)
	if err != nil {
		return nil, noCommit, lk, err
	}
	if len(p.originals) == 0 {
		return m.EncodeDeferredLimit(rendered, false, maxTokens)
	}
	text, spans, err := p.expand(rendered)
	if err != nil {
		return nil, noCommit, lk, err
	}
	if len(spans) == 0 {
		return m.EncodeDeferredLimit(text, false, maxTokens)
	}
	// The caches key on the text alone, so an encoding that depends on
	// where the client's text lies is never cached.
	ids, err = m.tok.EncodeWithLiteralSpansLimit(text, false, spans, maxTokens)
	if err != nil {
		return nil, noCommit, lk, err
	}
	return ids, noCommit, lk, nil
}

// protector replaces, in client strings, every piece that could become a
// special token (a whole special token's text, and at each end a fragment of
// one that the neighbouring text could complete) with a placeholder that
// client text cannot contain: U+E000, a random per-request nonce, an index,
// U+E001. After rendering, expand puts the pieces back and reports where
// they are, so that they are tokenized as text.
type protector struct {
	*specialSet
	nonce     string
	originals []string
}

// specialSet is the texts of a tokenizer's special tokens, and their first
// bytes (so that a scan only looks at positions where one may start).
type specialSet struct {
	texts []string
	first [256]bool
}

func newSpecialSet(texts []string) *specialSet {
	s := &specialSet{texts: texts}
	for _, t := range texts {
		s.first[t[0]] = true
	}
	return s
}

func newProtector(specials *specialSet) (*protector, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("chat encoding: nonce: %w", err)
	}
	return &protector{specialSet: specials, nonce: hex.EncodeToString(b[:])}, nil
}

const placeholderOpen, placeholderClose = "\ue000", "\ue001"

func (p *protector) protectList(list []any, depth int) ([]any, error) {
	if list == nil {
		return nil, nil
	}
	v, err := p.protect(list, depth)
	if err != nil {
		return nil, err
	}
	return v.([]any), nil
}

// protect returns a copy of v with its strings protected; the caller's
// values are never modified.
func (p *protector) protect(v any, depth int) (any, error) {
	if depth > maxProtectDepth {
		return nil, fmt.Errorf("chat encoding: values nested deeper than %d levels", maxProtectDepth)
	}
	switch x := v.(type) {
	case string:
		return p.protectString(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			n, err := p.protect(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	case []map[string]any:
		out := make([]any, len(x))
		for i, e := range x {
			n, err := p.protect(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			n, err := p.protect(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[k] = n
		}
		return out, nil
	case *template.OrderedMap:
		out := template.NewOrderedMap()
		for _, k := range x.Keys() {
			e, _ := x.Get(k)
			n, err := p.protect(e, depth+1)
			if err != nil {
				return nil, err
			}
			out.Set(k, n)
		}
		return out, nil
	}
	return v, nil
}

// protectString replaces the dangerous pieces of s with placeholders.
func (p *protector) protectString(s string) (string, error) {
	if strings.Contains(s, p.nonce) {
		return "", errors.New("chat encoding: client text contains the request's nonce")
	}
	var spans []tokenize.ByteRange
	for i := 0; i < len(s); {
		if !p.first[s[i]] {
			i++
			continue
		}
		end := i
		for _, sp := range p.texts {
			if len(sp) > end-i && strings.HasPrefix(s[i:], sp) {
				end = i + len(sp)
			}
		}
		if end > i {
			spans = append(spans, tokenize.ByteRange{Start: i, End: end})
			i = end
			continue
		}
		i++
	}
	lead, trail := 0, len(s)
	for _, sp := range p.texts {
		for k := len(sp) - 1; k > 0; k-- {
			if k > lead && strings.HasPrefix(s, sp[len(sp)-k:]) {
				lead = k
			}
			if len(s)-k < trail && strings.HasSuffix(s, sp[:k]) {
				trail = len(s) - k
			}
		}
	}
	if lead > 0 {
		spans = append(spans, tokenize.ByteRange{Start: 0, End: lead})
	}
	if trail < len(s) {
		spans = append(spans, tokenize.ByteRange{Start: trail, End: len(s)})
	}
	if len(spans) == 0 {
		return s, nil
	}
	slices.SortFunc(spans, func(a, b tokenize.ByteRange) int { return a.Start - b.Start })
	var b strings.Builder
	pos := 0
	for i := 0; i < len(spans); {
		cur := spans[i]
		for i++; i < len(spans) && spans[i].Start <= cur.End; i++ {
			cur.End = max(cur.End, spans[i].End)
		}
		b.WriteString(s[pos:cur.Start])
		b.WriteString(placeholderOpen + p.nonce + strconv.Itoa(len(p.originals)) + placeholderClose)
		p.originals = append(p.originals, s[cur.Start:cur.End])
		pos = cur.End
	}
	b.WriteString(s[pos:])
	return b.String(), nil
}

// expand replaces the placeholders in rendered with the client's text and
// returns the spans of that text, in order and disjoint.
func (p *protector) expand(rendered string) (string, []tokenize.ByteRange, error) {
	open := placeholderOpen + p.nonce
	var b strings.Builder
	var spans []tokenize.ByteRange
	for {
		i := strings.Index(rendered, open)
		if i < 0 {
			break
		}
		b.WriteString(rendered[:i])
		rest := rendered[i+len(open):]
		j := strings.Index(rest, placeholderClose)
		k, err := strconv.Atoi(rest[:max(j, 0)])
		if j < 0 || err != nil || k < 0 || k >= len(p.originals) {
			return "", nil, fmt.Errorf("chat encoding: %w", ErrProtectedTextAltered)
		}
		start := b.Len()
		b.WriteString(p.originals[k])
		if n := len(spans); n > 0 && spans[n-1].End == start {
			spans[n-1].End = b.Len()
		} else {
			spans = append(spans, tokenize.ByteRange{Start: start, End: b.Len()})
		}
		rendered = rest[j+len(placeholderClose):]
	}
	if strings.Contains(rendered, p.nonce) || strings.Contains(b.String(), p.nonce) {
		return "", nil, fmt.Errorf("chat encoding: %w", ErrProtectedTextAltered)
	}
	b.WriteString(rendered)
	return b.String(), spans, nil
}

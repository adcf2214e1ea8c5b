// Package parse turns a model's output text, as it streams, into what a
// client can act on. It knows the output formats of model families; it does
// not know tokens, engines or gRPC.
//
// Every parser here takes the output as a sequence of text deltas of any
// size and gives back what can be released at once. Whatever the deltas, the
// concatenation of what it releases is the same as for the whole text in one
// delta: a marker split across two deltas is recognised, never leaked. A
// parser holds back only what might still turn out to be part of a marker
// (or whitespace it would trim), and releases it as soon as it cannot.
package parse

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ReasoningStyle is how a model family marks its reasoning.
type ReasoningStyle struct {
	// Name is the --reasoning-parser name.
	Name string
	// Start and End enclose the reasoning.
	Start, End string
}

// Reasoning styles of the model families kvgate parses.
var (
	// Qwen3 writes <think>…</think> at the start of its answer; its
	// thinking-only releases and enable_thinking=false open or close the
	// block in the prompt instead (see OpensInPrompt).
	Qwen3 = ReasoningStyle{Name: "qwen3", Start: "<think>", End: "</think>"}
	// DeepSeekR1's template opens <think> in the prompt: the answer starts
	// inside the reasoning and only closes it.
	DeepSeekR1 = ReasoningStyle{Name: "deepseek_r1", Start: "<think>", End: "</think>"}
)

// ReasoningStyles are the styles by name.
func ReasoningStyles() []ReasoningStyle { return []ReasoningStyle{Qwen3, DeepSeekR1} }

// ReasoningStyleNamed returns the style called name.
func ReasoningStyleNamed(name string) (ReasoningStyle, error) {
	var names []string
	for _, s := range ReasoningStyles() {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return ReasoningStyle{}, fmt.Errorf("unknown reasoning parser %q (available: %s)", name, strings.Join(names, ", "))
}

// OpensInPrompt reports whether prompt, a rendered chat prompt, leaves a
// reasoning block open for the answer: the template wrote Start after the
// last End. The answer then starts inside the reasoning.
func (s ReasoningStyle) OpensInPrompt(prompt string) bool {
	start := strings.LastIndex(prompt, s.Start)
	return start >= 0 && start > strings.LastIndex(prompt, s.End)
}

// reasoningState is where in the output a Reasoning parser is.
type reasoningState int

const (
	// atStart: nothing but whitespace seen; the answer may open a
	// reasoning block.
	atStart reasoningState = iota
	// inReasoning: inside the block, until End.
	inReasoning
	// afterEnd: the block closed; whitespace before the content is
	// trimmed.
	afterEnd
	// inContent: everything is content.
	inContent
)

// Reasoning splits one answer into reasoning and content as it streams.
//
// The rules, the same for any split of the text into deltas:
//   - the answer opens a reasoning block only with Start at its beginning
//     (after whitespace), or when the prompt left one open; Start anywhere
//     else, and End outside a block, are content;
//   - the reasoning is the text between the markers with the whitespace at
//     both ends trimmed; the content is what follows End, with the
//     whitespace at its beginning trimmed;
//   - an answer that ends inside the block (a length limit) is all
//     reasoning.
//
// A Reasoning is not safe for concurrent use.
type Reasoning struct {
	style ReasoningStyle
	state reasoningState
	// held is text received but not released: a possible marker prefix,
	// or whitespace that trimming may drop.
	held string
	// startedReasoning: some reasoning was released, so whitespace is no
	// longer leading.
	startedReasoning bool
	// partial is the start of a UTF-8 sequence the next delta completes:
	// whether it is whitespace is not known yet.
	partial string
}

// NewReasoning returns a parser for an answer in style; open says the prompt
// left a reasoning block open (OpensInPrompt).
func NewReasoning(style ReasoningStyle, open bool) *Reasoning {
	r := &Reasoning{style: style}
	if open {
		r.state = inReasoning
	}
	return r
}

// Push takes the next delta and returns the reasoning and content it
// releases.
func (r *Reasoning) Push(delta string) (reasoning, content string) {
	s := r.partial + delta
	n := incompleteRune(s)
	r.held, r.partial = r.held+s[:len(s)-n], s[len(s)-n:]
	var rb, cb strings.Builder
	for {
		progressed := false
		switch r.state {
		case atStart:
			rest := strings.TrimLeftFunc(r.held, unicode.IsSpace)
			switch {
			case strings.HasPrefix(rest, r.style.Start):
				r.held, r.state, progressed = rest[len(r.style.Start):], inReasoning, true
			case rest == "" || strings.HasPrefix(r.style.Start, rest):
				// Whitespace or a prefix of Start: wait.
			default:
				// The answer does not open a block: whitespace and all
				// are content.
				r.state, progressed = inContent, true
			}
		case inReasoning:
			if i := strings.Index(r.held, r.style.End); i >= 0 {
				rb.WriteString(r.releaseReasoning(strings.TrimRightFunc(r.held[:i], unicode.IsSpace)))
				r.held, r.state, progressed = r.held[i+len(r.style.End):], afterEnd, true
				break
			}
			// Release all but a possible start of End and the trailing
			// whitespace that may precede it.
			keep := markerPrefixLen(r.held, r.style.End)
			body := r.held[:len(r.held)-keep]
			trimmed := strings.TrimRightFunc(body, unicode.IsSpace)
			rb.WriteString(r.releaseReasoning(trimmed))
			r.held = r.held[len(trimmed):]
		case afterEnd:
			rest := strings.TrimLeftFunc(r.held, unicode.IsSpace)
			r.held = rest
			if rest != "" {
				r.state, progressed = inContent, true
			}
		case inContent:
			cb.WriteString(r.held)
			r.held = ""
		}
		if !progressed {
			return rb.String(), cb.String()
		}
	}
}

// releaseReasoning trims the whitespace at the start of the reasoning: it
// is released only once something else has been.
func (r *Reasoning) releaseReasoning(s string) string {
	if !r.startedReasoning {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
		if s != "" {
			r.startedReasoning = true
		}
	}
	return s
}

// Flush ends the answer and returns what was held: in a block, its text
// (trailing whitespace trimmed); an answer of whitespace alone gives
// nothing; a partial marker is text of the part it is in.
func (r *Reasoning) Flush() (reasoning, content string) {
	// A rune never completed is plain bytes.
	held := r.held + r.partial
	r.held, r.partial = "", ""
	switch r.state {
	case atStart:
		if strings.TrimSpace(held) == "" {
			return "", ""
		}
		return "", held
	case inReasoning:
		return r.releaseReasoning(strings.TrimRightFunc(held, unicode.IsSpace)), ""
	case afterEnd:
		return "", strings.TrimLeftFunc(held, unicode.IsSpace)
	}
	return "", held
}

// markerPrefixLen is the length of the longest suffix of s that is a proper
// prefix of marker: text that may become the marker with the next delta.
// It never cuts a UTF-8 sequence (markers are ASCII or whole runes).
func markerPrefixLen(s, marker string) int {
	for n := min(len(s), len(marker)-1); n > 0; n-- {
		if strings.HasPrefix(marker, s[len(s)-n:]) && utf8.RuneStart(s[len(s)-n]) {
			return n
		}
	}
	return 0
}

// incompleteRune is the length of the UTF-8 sequence s ends in when it is
// the start of a rune the next bytes may complete; 0 otherwise.
func incompleteRune(s string) int {
	for n := 1; n <= min(len(s), utf8.UTFMax-1); n++ {
		if utf8.RuneStart(s[len(s)-n]) {
			if tail := s[len(s)-n:]; !utf8.FullRuneInString(tail) {
				return n
			}
			return 0
		}
	}
	return 0
}

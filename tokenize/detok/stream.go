// Package detok turns a stream of generated token ids into text deltas.
//
// # Incremental decoding
//
// Decoding token by token is wrong: a character may be split over several
// tokens (byte-level BPE, or SentencePiece byte fallback such as
// <0xE6><0x97><0xA5> for 日), and decoders such as SentencePiece's strip the
// leading space of the first token, so decode(a)+decode(b) != decode(a+b).
// Decoding everything again at each token is right but quadratic. Detokenizer uses
// the technique of Hugging Face's TextStreamer and vLLM: it keeps two offsets
// into the ids, prefix and read, decodes only the window ids[prefix:], and
// emits what that adds to the text of ids[prefix:read]. It emits only when the
// window's text does not end in U+FFFD (an incomplete character whose bytes
// are still coming); then prefix moves to read and read to the end. Each id is
// decoded a bounded number of times, so the cost is linear in the output.
//
// With SkipSpecialTokens, special ids are dropped before they enter the
// window, exactly as Decode(ids, true) drops them before its decoder chain
// runs, so a skipped token between two words does not cut the context that
// decides their spacing. Without PromptIDs the concatenated deltas (plus
// Finish) equal Decode(all ids, SkipSpecialTokens). With PromptIDs the window
// starts a few prompt tokens back (as vLLM does), so the first generated
// token renders as it would after the prompt (e.g. with its leading space).
//
// A stream whose text keeps ending in U+FFFD would hold the window open, and
// grow it, forever: a long run of byte-fallback tokens (a SentencePiece
// decoder renders a whole run as U+FFFD while any of its characters is
// incomplete), or bytes that never form a character. Once more than
// maxPending ids are pending, Detokenizer emits up to the latest complete point,
// or failing that all but the last four ids (see unstick). For ids that
// decode to invalid UTF-8 the deltas may then differ from Decode, which can
// turn a whole byte run into U+FFFD because of one bad byte at its end:
// text already emitted is never taken back.
//
// # Stop strings and stop tokens
//
// Text is matched against the stop strings as it is decoded, across token
// boundaries. Text that could still be the start of a stop string is held
// back, and emitted once it can no longer match (or at Finish). When stop
// strings match, the one that is completed first (earliest end; at equal
// ends the one starting first) wins: the stream stops and its text ends just
// before the stop string, or just after it with NoStopTrim. Text after it is
// dropped. A stop token id ends the stream too; like SGLang, its own text is
// left out unless NoStopTrim (a special token skipped by SkipSpecialTokens has
// no text either way). Matched reports which stop ended the stream.
package detok

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// Decoder is the part of a tokenizer the stream needs.
type Decoder interface {
	Decode(ids []uint32, skipSpecialTokens bool) (string, error)
	IsSpecial(id uint32) bool
}

// Options configure a Detokenizer.
type Options struct {
	SkipSpecialTokens bool
	StopStrings       []string // empty strings are ignored
	StopTokenIDs      []uint32
	NoStopTrim        bool     // keep the matched stop string (or stop token text) in the output
	PromptIDs         []uint32 // optional: the prompt, as decoding context for the first tokens
	// KeepSpecial are special ids whose text is kept even with
	// SkipSpecialTokens: the markers an output parser reads (a tool-call
	// format's [TOOL_CALLS], say), while end-of-turn tokens stay out.
	KeepSpecial []uint32
}

const (
	// promptContext is how many prompt ids the first window starts with
	// (vLLM's INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET).
	promptContext = 5
	// maxPending bounds the ids held while the text ends in U+FFFD.
	maxPending = 8
	// compactAt is the number of dead ids before the window that triggers
	// dropping them.
	compactAt = 1024
)

// Detokenizer is an incremental detokenizer for one generation. It is not safe for
// concurrent use.
type Detokenizer struct {
	dec  Decoder
	opts Options

	ids          []uint32 // window ids (special ids already dropped if skipped)
	prefixOffset int
	readOffset   int

	held       string // decoded text not yet emitted: a possible stop-string start
	done       bool   // stopped or finished
	matchedStr string
	matchedTok *uint32
}

// NewStream starts a stream. Options' slices are not retained.
func NewStream(dec Decoder, opts Options) *Detokenizer {
	s := &Detokenizer{dec: dec, opts: opts}
	s.opts.StopStrings = slices.DeleteFunc(slices.Clone(opts.StopStrings), func(x string) bool { return x == "" })
	s.opts.StopTokenIDs = slices.Clone(opts.StopTokenIDs)
	s.opts.KeepSpecial = slices.Clone(opts.KeepSpecial)
	s.opts.PromptIDs = nil
	// Only the prompt's last promptContext ids (of those the window keeps)
	// are ever decoded: copying the whole prompt here was two thirds of the
	// bytes the router allocated for an 8K-token request.
	tail := s.promptTail(opts.PromptIDs)
	s.ids = make([]uint32, 0, max(len(tail), windowCap))
	s.appendIDs(tail)
	s.readOffset = len(s.ids)
	return s
}

// windowCap is the room the window starts with: the prompt's context and a
// short answer fit without growing it.
const windowCap = 32

// promptTail is the shortest suffix of prompt holding the promptContext ids
// the window starts with; special ids the window drops are skipped over.
func (s *Detokenizer) promptTail(prompt []uint32) []uint32 {
	kept, i := 0, len(prompt)
	for i > 0 && kept < promptContext {
		i--
		if s.keeps(prompt[i]) {
			kept++
		}
	}
	return prompt[i:]
}

// Push adds generated ids and returns the text that can now be emitted. When
// a stop string or stop token is reached, stopped is true, delta holds the
// final text and later calls return ("", true, nil). An error from the
// decoder is returned as is, and the stream should then be abandoned.
func (s *Detokenizer) Push(ids []uint32) (delta string, stopped bool, err error) {
	if s.done {
		return "", s.stopped(), nil
	}
	stopAt := slices.IndexFunc(ids, s.isStopToken)
	if stopAt < 0 {
		stopAt = len(ids)
	}
	var out strings.Builder
	s.appendIDs(ids[:stopAt])
	text, err := s.step(false)
	if err != nil {
		return "", false, err
	}
	out.WriteString(s.feed(text, false))
	if s.done || stopAt == len(ids) {
		return out.String(), s.done, nil
	}
	tok := ids[stopAt]
	if s.opts.NoStopTrim {
		s.appendIDs(ids[stopAt : stopAt+1])
	}
	text, err = s.step(true)
	if err != nil {
		return "", false, err
	}
	out.WriteString(s.feed(text, true))
	if s.matchedStr == "" {
		s.matchedTok = &tok
	}
	s.done = true
	return out.String(), true, nil
}

// Finish flushes the text held back (an incomplete character at the end is
// rendered as the decoder renders it, as Decode would) and ends the stream.
func (s *Detokenizer) Finish() (delta string) {
	if s.done {
		return ""
	}
	text, err := s.step(true)
	if err != nil {
		text = "" // the decoder already failed on these ids in Push
	}
	out := s.feed(text, true)
	s.done = true
	return out
}

// Matched reports which stop ended the stream: a stop string, a stop token id,
// or neither.
func (s *Detokenizer) Matched() (stopString string, stopTokenID *uint32) {
	return s.matchedStr, s.matchedTok
}

func (s *Detokenizer) stopped() bool { return s.matchedStr != "" || s.matchedTok != nil }

func (s *Detokenizer) isStopToken(id uint32) bool { return slices.Contains(s.opts.StopTokenIDs, id) }

func (s *Detokenizer) appendIDs(ids []uint32) {
	for _, id := range ids {
		if s.keeps(id) {
			s.ids = append(s.ids, id)
		}
	}
}

// keeps reports whether id enters the window: with SkipSpecialTokens,
// special ids other than the kept ones do not.
func (s *Detokenizer) keeps(id uint32) bool {
	return !s.opts.SkipSpecialTokens || !s.dec.IsSpecial(id) || slices.Contains(s.opts.KeepSpecial, id)
}

// step decodes the window and returns the newly stable text. With final set it
// returns everything left, incomplete characters included.
func (s *Detokenizer) step(final bool) (string, error) {
	if s.readOffset == len(s.ids) {
		return "", nil
	}
	prefix, err := s.decode(s.prefixOffset, s.readOffset)
	if err != nil {
		return "", err
	}
	full, err := s.decode(s.prefixOffset, len(s.ids))
	if err != nil {
		return "", err
	}
	stable := strings.HasPrefix(full, prefix) && !strings.HasSuffix(full, string(utf8.RuneError))
	if !stable && !final {
		if len(s.ids)-s.readOffset <= maxPending {
			return "", nil
		}
		return s.unstick(prefix, full)
	}
	delta := full[commonPrefix(full, prefix):]
	s.advance(len(s.ids))
	return delta, nil
}

// unstick handles a window whose text has ended in U+FFFD for more than
// maxPending ids. It emits up to the latest cut whose text is complete (as a
// Push ending there would have); failing that (bytes that form no character),
// up to all but the last four ids, whose text alone can still change, a UTF-8
// character having at most four bytes.
func (s *Detokenizer) unstick(prefix, full string) (string, error) {
	try := func(cut int, complete bool) (string, bool, error) {
		mid, err := s.decode(s.prefixOffset, cut)
		if err != nil {
			return "", false, err
		}
		if !strings.HasPrefix(mid, prefix) {
			return "", false, nil
		}
		// A complete cut is what a Push ending there would have emitted. An
		// incomplete one must at least be confirmed by the ids after it.
		if complete && strings.HasSuffix(mid, string(utf8.RuneError)) ||
			!complete && !strings.HasPrefix(full, mid) {
			return "", false, nil
		}
		s.advance(cut)
		return mid[len(prefix):], true, nil
	}
	for cut := len(s.ids) - 1; cut > s.readOffset; cut-- {
		if delta, ok, err := try(cut, true); ok || err != nil {
			return delta, err
		}
	}
	delta, _, err := try(len(s.ids)-4, false)
	return delta, err
}

func (s *Detokenizer) advance(read int) {
	s.prefixOffset, s.readOffset = s.readOffset, read
	if s.prefixOffset >= compactAt {
		n := copy(s.ids, s.ids[s.prefixOffset:])
		s.ids = s.ids[:n]
		s.readOffset -= s.prefixOffset
		s.prefixOffset = 0
	}
}

func (s *Detokenizer) decode(from, to int) (string, error) {
	if from == to {
		return "", nil
	}
	// The window holds no special id but the kept ones (appendIDs dropped
	// the others), so decoding it whole is decoding it skipping them.
	return s.dec.Decode(s.ids[from:to], s.opts.SkipSpecialTokens && len(s.opts.KeepSpecial) == 0)
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			// Back up to a character boundary of a.
			for i > 0 && !utf8.RuneStart(a[i]) {
				i--
			}
			return i
		}
	}
	return n
}

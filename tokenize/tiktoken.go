package tokenize

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
)

// tiktoken rank files (OpenAI's *.tiktoken, the tiktoken.model of Llama 3's original
// checkpoint and of Kimi K2) hold one "<base64 of the token's bytes> <rank>" line per
// token. tiktoken encodes a text by cutting out the special tokens it is allowed to see,
// splitting the rest with a regex, and turning each piece into one token when the piece
// is a token, else merging its bytes: repeatedly, the adjacent pair whose concatenation
// has the lowest rank, the leftmost among equals.
//
// That is byte-level BPE as Hugging Face runs it, given the right tables, so a tiktoken
// file becomes the same Tokenizer as a tokenizer.json, and the caches, the streaming
// detokenizer and the chat templates work on it unchanged:
//
//   - vocabulary: each token under its GPT-2 byte-level spelling, id = rank (what
//     transformers' TikTokenConverter writes, e.g. Llama 3's tokenizer.json, so
//     IDToToken and TokenToID agree with the converted files);
//   - merges: every split of every token into two tokens, (a, b) → ab, ranked by ab's
//     rank. A pair then ranks as its concatenation does, which is tiktoken's rule, and
//     the splits of one token share a rank, so ties go to the leftmost pair, as in
//     tiktoken (a converted merges list gives each split a rank of its own instead);
//   - ignore_merges: a piece that is a token is that token, tiktoken's first check;
//   - pre-tokenizer: the pattern's matches, and only them (tiktoken drops text no
//     alternative matches; the patterns here match everything), then raw bytes;
//   - decoder: byte-level, so bytes that are not valid UTF-8 become U+FFFD per maximal
//     invalid subpart, as everywhere in this package;
//   - special tokens: added tokens with their explicit ids, all special. Encode matches
//     them everywhere in the text, as tiktoken's encode(text, allowed_special="all")
//     does; EncodeSplitSpecialTokens leaves them as text, as encode_ordinary(text) does.
//     tiktoken has no post-processor, so addSpecialTokens adds nothing (no BOS).
//
// Merging uses the package's merge loop, which switches to a heap over a linked list
// for long pieces: O(n log n) where tiktoken's own loop is quadratic.

// tiktokenSpec is what a rank file needs besides its ranks: the split pattern and the
// special tokens (content → id).
type tiktokenSpec struct {
	pattern string
	special map[string]uint32
}

// parseTiktokenRanks reads a rank file into the token bytes of each rank ("" for an
// unused rank). Blank lines are skipped; a rank given twice is an error (a token given
// twice is caught by newTiktokenModel, which indexes the tokens anyway).
func parseTiktokenRanks(data []byte) ([]string, error) {
	var toks []string
	for n := 1; len(data) > 0; n++ {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		// Trimmed, a line cannot start with the separator: no token is empty.
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		b64, rankText, ok := bytes.Cut(line, []byte{' '})
		if !ok {
			return nil, fmt.Errorf("line %d: want \"<base64> <rank>\"", n)
		}
		tok, err := base64.StdEncoding.DecodeString(string(b64))
		if err != nil {
			return nil, fmt.Errorf("line %d: token: %w", n, err)
		}
		rank, err := strconv.ParseUint(string(bytes.TrimSpace(rankText)), 10, 31)
		if err != nil {
			return nil, fmt.Errorf("line %d: rank: %w", n, err)
		}
		for len(toks) <= int(rank) {
			toks = append(toks, "")
		}
		if toks[rank] != "" {
			return nil, fmt.Errorf("line %d: rank %d appears twice", n, rank)
		}
		toks[rank] = string(tok)
	}
	if len(toks) == 0 {
		return nil, errors.New("no tokens")
	}
	return toks, nil
}

// newTiktokenModel builds the byte-level BPE model of a rank list (see the comment at the
// top of this file). Every single byte must be a token, as tiktoken requires to encode
// any text.
func newTiktokenModel(toks []string) (*bpeModel, error) {
	m := &bpeModel{
		vocab:  make(map[string]uint32, len(toks)),
		merges: make(map[uint64]mergeInfo, 2*len(toks)),
		unkID:  -1,
		cache:  newWordCache(),
	}
	raw := make(map[string]uint32, len(toks))
	for id, tok := range toks {
		if prev, dup := raw[tok]; dup && tok != "" {
			return nil, fmt.Errorf("token %q has ranks %d and %d", tok, prev, id)
		}
		if tok != "" {
			raw[tok] = uint32(id)
			m.vocab[bytesUnicode.encode(tok)] = uint32(id)
		}
	}
	for b := 0; b < 256; b++ {
		if _, ok := raw[string([]byte{byte(b)})]; !ok {
			return nil, fmt.Errorf("byte 0x%02x is not a token", b)
		}
	}
	for id, tok := range toks {
		for i := 1; i < len(tok); i++ {
			a, okA := raw[tok[:i]]
			b, okB := raw[tok[i:]]
			if okA && okB {
				m.merges[pairKey(a, b)] = mergeInfo{rank: uint32(id), newID: uint32(id)}
			}
		}
	}
	m.indexVocab()
	// enableByteLevel would rebuild the raw-bytes vocabulary of ignore_merges by decoding
	// every spelled token; raw is that map already.
	m.ignoreMerges = false
	m.enableByteLevel()
	m.ignoreMerges, m.rawVocab = true, raw
	if !m.byteLevelOK {
		return nil, errors.New("the byte-level table is incomplete")
	}
	return m, nil
}

// fromTiktoken assembles a Tokenizer from a rank file's tokens, its spec and, optionally
// (nil), tokenizer_config.json.
func fromTiktoken(toks []string, spec tiktokenSpec, tokenizerConfigJSON []byte) (*Tokenizer, error) {
	model, err := newTiktokenModel(toks)
	if err != nil {
		return nil, fmt.Errorf("tiktoken ranks: %w", err)
	}
	m, err := newRegexMatcher(spec.pattern)
	if err != nil {
		return nil, fmt.Errorf("tiktoken pattern: %w", err)
	}
	t := &Tokenizer{
		model: model,
		bpe:   model,
		// Keep the matches, drop what lies between them (Removed, inverted), as
		// tiktoken's find_iter loop does.
		pre: sequencePreTokenizer{
			splitPreTokenizer{m: m, behavior: behaviorRemoved, invert: true, cut: regexCut(spec.pattern, behaviorRemoved, true)},
			byteLevelPreTokenizer{deferMapping: true},
		},
		decoder:        byteLevelDecoder{},
		specialContent: make(map[string]bool, len(spec.special)),
		vocabSize:      len(toks),
	}
	added := make(map[uint32]AddedToken, len(spec.special))
	for content, id := range spec.special {
		if content == "" {
			return nil, errors.New("tiktoken: a special token is empty")
		}
		if int(id) < len(toks) && toks[id] != "" {
			return nil, fmt.Errorf("tiktoken: special token %q has id %d, which is the rank of %q", content, id, toks[id])
		}
		if prev, ok := added[id]; ok {
			return nil, fmt.Errorf("tiktoken: special tokens %q and %q share id %d", prev.Content, content, id)
		}
		added[id] = AddedToken{ID: id, Content: content, Special: true}
		t.specialContent[content] = true
		t.vocabSize = max(t.vocabSize, int(id)+1)
	}
	t.added = indexAddedTokens(added, nil)
	if t.cfg, err = parseConfig(tokenizerConfigJSON); err != nil {
		return nil, err
	}
	t.cutSafe = cutSafe(t.pre)
	t.maxTokenBytes = byteLevelMaxTokenBytes(model)
	return t, nil
}

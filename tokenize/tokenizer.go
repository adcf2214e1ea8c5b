package tokenize

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unicode/utf8"
)

// ErrInvalidUTF8 is returned (wrapped) by Encode for text that is not valid UTF-8.
var ErrInvalidUTF8 = errors.New("text is not valid UTF-8")

// Tokenizer encodes text to token ids and back with the behaviour of a Hugging Face
// tokenizer.json. It is immutable after loading and safe for concurrent use.
type Tokenizer struct {
	model tokenModel
	// bpe is model when it is BPE (nil otherwise): the byte-level fast path is its own.
	bpe        *bpeModel
	normalizer Normalizer
	pre        PreTokenizer
	post       PostProcessor
	decoder    PieceDecoder
	added      *addedVocab
	// specialContent is HF's special_tokens_set: decoding with skipSpecialTokens drops
	// every token whose string is in it.
	specialContent map[string]bool
	vocabSize      int
	cfg            Config
	scratch        sync.Pool // *scratch
	// cutSafe: long text is pre-tokenized in windows (see cutSafe in
	// bounded.go); maxTokenBytes: the longest token's bytes of a byte-level
	// BPE model, for EncodeLimit's lower bound (0: none).
	cutSafe       bool
	maxTokenBytes int
}

func usesDeferredByteLevel(pt PreTokenizer) bool {
	switch v := pt.(type) {
	case byteLevelPreTokenizer:
		return v.deferMapping
	case sequencePreTokenizer:
		return len(v) > 0 && usesDeferredByteLevel(v[len(v)-1])
	}
	return false
}

// Load reads a tokenizer from a tokenizer.json file, or from a model directory holding
// tokenizer.json. tokenizer_config.json is read from the same directory if present.
// A tiktoken rank file (tiktoken.model, <encoding>.tiktoken), or a directory holding one
// and no tokenizer.json, is loaded as FromTiktoken describes.
func Load(path string) (*Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if tk, ok, err := FindTiktoken(path); err != nil || ok {
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		return loadTiktoken(tk)
	}
	dir, file := path, filepath.Join(path, "tokenizer.json")
	if !st.IsDir() {
		dir, file = filepath.Dir(path), path
	}
	tj, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	cj, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := FromJSON(tj, cj)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", file, err)
	}
	return t, nil
}

// FromJSON builds a tokenizer from the contents of tokenizer.json and, optionally
// (nil), tokenizer_config.json.
func FromJSON(tokenizerJSON, tokenizerConfigJSON []byte) (*Tokenizer, error) {
	var spec struct {
		AddedTokens   json.RawMessage `json:"added_tokens"`
		Normalizer    json.RawMessage `json:"normalizer"`
		PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
		PostProcessor json.RawMessage `json:"post_processor"`
		Decoder       json.RawMessage `json:"decoder"`
		Model         json.RawMessage `json:"model"`
	}
	if err := json.Unmarshal(tokenizerJSON, &spec); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if len(spec.Model) == 0 || string(spec.Model) == "null" {
		return nil, errors.New("tokenizer.json: no model")
	}
	t := &Tokenizer{specialContent: make(map[string]bool)}
	var err error
	if t.model, err = newModel(spec.Model); err != nil {
		return nil, err
	}
	t.bpe, _ = t.model.(*bpeModel)
	if t.normalizer, err = newNormalizer(spec.Normalizer); err != nil {
		return nil, err
	}
	if t.pre, err = newPreTokenizer(spec.PreTokenizer); err != nil {
		return nil, err
	}
	if t.pre != nil {
		t.pre = deferByteLevel(t.pre)
		if usesDeferredByteLevel(t.pre) {
			if t.bpe == nil {
				return nil, errors.New("tokenizer.json: the ByteLevel pre-tokenizer needs a BPE model")
			}
			t.bpe.enableByteLevel()
		}
	}
	if t.post, err = newPostProcessor(spec.PostProcessor); err != nil {
		return nil, err
	}
	if t.decoder, err = newDecoder(spec.Decoder); err != nil {
		return nil, err
	}
	if t.added, err = newAddedVocab(spec.AddedTokens, t.model, t.normalizer); err != nil {
		return nil, err
	}
	t.vocabSize = max(t.model.Size(), t.model.idBound())
	for _, a := range t.added.tokens {
		if a.Special {
			t.specialContent[a.Content] = true
		}
		t.vocabSize = max(t.vocabSize, int(a.ID)+1)
	}
	if t.cfg, err = parseConfig(tokenizerConfigJSON); err != nil {
		return nil, err
	}
	t.cutSafe = t.pre != nil && cutSafe(t.pre)
	if usesDeferredByteLevel(t.pre) {
		t.maxTokenBytes = byteLevelMaxTokenBytes(t.bpe)
	}
	return t, nil
}

// Encode returns the ids of text. With addSpecialTokens the post-processor adds its
// special tokens (e.g. BOS). Special tokens written in the text are always recognized.
func (t *Tokenizer) Encode(text string, addSpecialTokens bool) ([]uint32, error) {
	return t.encode(text, addSpecialTokens, nil)
}

// encode is Encode with special tokens left as text inside the literal spans
// (see EncodeWithLiteralSpans).
func (t *Tokenizer) encode(text string, addSpecialTokens bool, literal []ByteRange) ([]uint32, error) {
	return t.encodeBounded(text, addSpecialTokens, literal, 0, encodeWindow)
}

// encodeBounded is encode that stops once the text has more than maxTokens
// tokens (0: no limit), pre-tokenizing long inputs in windows of about
// window bytes where the pre-tokenizer allows it.
func (t *Tokenizer) encodeBounded(text string, addSpecialTokens bool, literal []ByteRange, maxTokens, window int) ([]uint32, error) {
	if !utf8.ValidString(text) {
		return nil, fmt.Errorf("encode: %w", ErrInvalidUTF8)
	}
	guess := len(text)/3 + 4
	if maxTokens > 0 {
		guess = min(guess, maxTokens+1)
	}
	ids := make([]uint32, 0, guess)
	sc, _ := t.scratch.Get().(*scratch)
	if sc == nil {
		sc = new(scratch)
	}
	defer func() {
		sc.release()
		t.scratch.Put(sc)
	}()
	over := func(known int) error {
		if maxTokens > 0 && known > maxTokens {
			return fmt.Errorf("encode: %w", &TooManyTokensError{Limit: maxTokens, AtLeast: known})
		}
		return nil
	}
	if literal == nil {
		sc.segs = t.added.split(sc.segs[:0], text, true, t.added.raw)
	} else {
		sc.segs = t.added.splitLiteral(sc.segs[:0], text, literal)
	}
	for _, seg := range sc.segs {
		if seg.id >= 0 {
			ids = append(ids, uint32(seg.id))
			if err := over(len(ids)); err != nil {
				return nil, err
			}
			continue
		}
		s := seg.text
		if t.normalizer != nil {
			s = t.normalizer.Normalize(s)
		}
		norm := t.added.norm
		if seg.literal {
			norm = t.added.normPlain
		}
		sc.nsegs = t.added.split(sc.nsegs[:0], s, seg.atStart, norm)
		for _, sub := range sc.nsegs {
			if sub.id >= 0 {
				ids = append(ids, uint32(sub.id))
			} else if sub.text == "" {
				continue
			} else if err := over(len(ids) + t.minTokens(sub.text)); err != nil {
				return nil, err
			} else if t.pre == nil {
				ids = t.model.Tokenize(ids, sub.text)
			} else {
				ids = t.preTokenizeAndTokenize(ids, sub, sc, maxTokens, window)
			}
			if err := over(len(ids)); err != nil {
				return nil, err
			}
		}
	}
	if addSpecialTokens && t.post != nil {
		ids = t.post.Process(make([]uint32, 0, len(ids)+4), ids)
		if err := over(len(ids)); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// preTokenizeAndTokenize appends the ids of one pre-tokenizer input. A long
// input is pre-tokenized a window at a time when the pre-tokenizer is
// cut-safe, and tokenizing stops after the window that passed maxTokens.
func (t *Tokenizer) preTokenizeAndTokenize(ids []uint32, sub segment, sc *scratch, maxTokens, window int) []uint32 {
	s, atStart := sub.text, sub.atStart
	for s != "" {
		end := len(s)
		if t.cutSafe {
			end = nextCut(s, window)
		}
		sc.pre = t.pre.PreTokenize(reserve(sc.pre, preTokenGuess(end)), preToken{s: s[:end], atStart: atStart}, sc)
		for _, p := range sc.pre {
			if p.byteLevel {
				ids = t.bpe.tokenizeByteLevel(ids, p.s)
			} else {
				ids = t.model.Tokenize(ids, p.s)
			}
		}
		if maxTokens > 0 && len(ids) > maxTokens {
			return ids
		}
		s, atStart = s[end:], false
	}
	return ids
}

// Decode turns ids back into text. With skipSpecialTokens, special tokens are left out.
// An id outside the vocabulary is an error.
func (t *Tokenizer) Decode(ids []uint32, skipSpecialTokens bool) (string, error) {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		tok, ok := t.decodeForm(id)
		if !ok {
			return "", fmt.Errorf("decode: id %d is outside the vocabulary (size %d)", id, t.vocabSize)
		}
		if skipSpecialTokens && t.specialContent[tok] {
			continue
		}
		tokens = append(tokens, tok)
	}
	if t.decoder == nil {
		return strings.Join(tokens, " "), nil
	}
	return strings.Join(t.decoder.DecodeChain(tokens), ""), nil
}

func (t *Tokenizer) decodeForm(id uint32) (string, bool) {
	if a, ok := t.added.token(id); ok {
		if f, ok := t.added.decodeForm[id]; ok {
			return f, true
		}
		return a.Content, true
	}
	return t.model.IDToToken(id)
}

// VocabSize is the number of ids, added tokens included (largest id + 1).
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// TokenToID looks a token up among the added tokens, then in the model vocabulary.
func (t *Tokenizer) TokenToID(tok string) (uint32, bool) {
	if id, ok := t.added.byContent[tok]; ok {
		return id, true
	}
	return t.model.TokenToID(tok)
}

// IDToToken is the token string of id (an added token's content, or the vocabulary
// entry, byte-level spelling included).
func (t *Tokenizer) IDToToken(id uint32) (string, bool) {
	if a, ok := t.added.token(id); ok {
		return a.Content, true
	}
	return t.model.IDToToken(id)
}

// AddedTokens lists the added tokens in id order.
func (t *Tokenizer) AddedTokens() []AddedToken {
	return append([]AddedToken(nil), t.added.tokens...)
}

// IsSpecial reports whether id is a special added token.
func (t *Tokenizer) IsSpecial(id uint32) bool {
	a, ok := t.added.token(id)
	return ok && a.Special
}

// Config is the parsed tokenizer_config.json (zero if there was none).
func (t *Tokenizer) Config() Config { return t.cfg.clone() }

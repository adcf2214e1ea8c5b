package cache

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// Encoder is the part of a tokenizer the cache needs. Encode must be a pure
// function of its arguments and safe for concurrent use.
type Encoder interface {
	Encode(text string, addSpecialTokens bool) ([]uint32, error)
}

// Config sizes the two levels. The zero value disables both; use
// DefaultConfig for the defaults. A zero or negative size in an enabled
// level means that size's default.
//
// Both levels are bounded in accounted bytes (text bytes, 4 bytes per id and
// the per-entry overheads described in the package doc) at all times: an
// insertion evicts, under the same lock, until the level is within its
// budget again. An entry larger than MaxEntryBytes is not cached at all, so
// a few huge prompts cannot flush everything else.
type Config struct {
	L0Enabled    bool
	L0MaxEntries int   // default 10,000
	L0MaxBytes   int64 // default 67,108,864 (64 MiB), split evenly across shards
	L0Shards     int   // default 1 (one mutex, exact LRU); see BenchmarkL0Hit
	L1Enabled    bool
	L1MaxBytes   int64 // default 52,428,800 (50 MiB)
	// MaxEntryBytes is the largest accounted size of one L0 entry or one L1
	// node; default 2,097,152 (2 MiB): a full 128k-token prompt (about
	// 0.5 MB of text and 0.5 MB of ids) still fits, a multi-megabyte text
	// does not. It is further capped by each level's (or shard's) budget.
	MaxEntryBytes int64
}

// Defaults of Config's sizes.
const (
	DefaultL0MaxEntries  = 10000
	DefaultL0MaxBytes    = 64 << 20
	DefaultL1MaxBytes    = 50 << 20
	DefaultMaxEntryBytes = 2 << 20
)

// DefaultConfig has both levels on: they are exact, so there is no reason to
// leave them off. L0 holds up to 10,000 entries and 64 MiB, L1 50 MiB, and no
// single entry over 2 MiB is cached: at most 114 MiB of accounted memory.
func DefaultConfig() Config {
	return Config{
		L0Enabled: true, L0MaxEntries: DefaultL0MaxEntries, L0MaxBytes: DefaultL0MaxBytes, L0Shards: 1,
		L1Enabled: true, L1MaxBytes: DefaultL1MaxBytes,
		MaxEntryBytes: DefaultMaxEntryBytes,
	}
}

// Stats is a snapshot of the cache counters. Counters only grow; Entries and
// Bytes are current sizes (Bytes is the accounted memory, see the package doc).
type Stats struct {
	L0Hits, L0Misses uint64
	L0Entries        int
	L0Bytes          int64
	L1Hits, L1Misses uint64
	L1Entries        int
	L1Bytes          int64
	L1HitBytes       uint64  // text bytes served from L1 instead of tokenized
	L1Enabled        [2]bool // by addSpecialTokens: [0] false, [1] true
	L1DisabledReason [2]string
	L1BoundaryTokens int // eligible boundary tokens of the tokenizer
}

// Cache is a tokenizer with an exact-match level (L0) and a special-token
// boundary prefix level (L1) in front. It is safe for concurrent use.
type Cache struct {
	enc  Encoder
	l0   *l0
	l1   *l1
	scan *scanner
	// l1On[add] is false when L1 is off in the config, the tokenizer has no
	// eligible boundary token, or the construction probes showed that the
	// tokenizer's segments do not compose for that value of add.
	l1On     [2]bool
	l1Reason [2]string

	l0Hits, l0Misses, l1Hits, l1Misses, l1HitBytes atomic.Uint64
}

// New puts a cache in front of enc. tokens are the tokenizer's added tokens
// (all of them, special or not: every raw-matched added token splits the
// text, so the boundary scan must see them all). With L1 enabled, New runs a
// few dozen small encodes to check that segments compose (see the package
// doc); an Encode error during the probes disables L1.
func New(enc Encoder, tokens []AddedToken, cfg Config) *Cache {
	c := &Cache{enc: enc}
	if cfg.MaxEntryBytes <= 0 {
		cfg.MaxEntryBytes = DefaultMaxEntryBytes
	}
	if cfg.L0Enabled {
		if cfg.L0MaxEntries <= 0 {
			cfg.L0MaxEntries = DefaultL0MaxEntries
		}
		if cfg.L0MaxBytes <= 0 {
			cfg.L0MaxBytes = DefaultL0MaxBytes
		}
		if cfg.L0Shards <= 0 {
			cfg.L0Shards = 1
		}
		c.l0 = newL0(cfg.L0MaxEntries, cfg.L0MaxBytes, cfg.MaxEntryBytes, cfg.L0Shards)
	}
	if !cfg.L1Enabled {
		c.l1Reason = [2]string{"disabled by configuration", "disabled by configuration"}
		return c
	}
	if cfg.L1MaxBytes <= 0 {
		cfg.L1MaxBytes = DefaultL1MaxBytes
	}
	c.scan = newScanner(tokens)
	for _, add := range []bool{false, true} {
		i := rootIndex(add)
		c.l1Reason[i] = c.probe(tokens, add)
		c.l1On[i] = c.l1Reason[i] == ""
	}
	if c.l1On[0] || c.l1On[1] {
		c.l1 = newL1(cfg.L1MaxBytes, cfg.MaxEntryBytes)
	}
	return c
}

// Encode returns the ids of text, identical to enc.Encode(text, addSpecial),
// and caches them. The returned slice belongs to the caller.
func (c *Cache) Encode(text string, addSpecial bool) ([]uint32, error) {
	ids, commit, err := c.EncodeDeferred(text, addSpecial)
	if err != nil {
		return nil, err
	}
	commit()
	return ids, nil
}

// EncodeDeferred is Encode that looks the text up in the caches but stores
// nothing until commit is called. It lets a caller tokenize a request, check
// it (vocabulary, context length) and cache only the requests that pass, so
// that rejected prompts never occupy the cache.
//
// commit is never nil; it is idempotent, safe to call from any goroutine, and
// costs a copy of the entry at most. Not calling it caches nothing. ids
// belongs to the caller, who may modify it without affecting commit.
func (c *Cache) EncodeDeferred(text string, addSpecial bool) (ids []uint32, commit func(), err error) {
	ids, commit, _, err = c.EncodeDeferredLookup(text, addSpecial)
	return ids, commit, err
}

// Lookup is how the caches served one encode, for a request's trace.
type Lookup struct {
	L0Hit bool // the whole text's ids came from L0
	// L1HitBytes is how many leading bytes of the text had their ids
	// taken from L1 (0: an L1 miss, L1 off, or an L0 hit).
	L1HitBytes int
}

// EncodeDeferredLookup is EncodeDeferred that also says how the caches
// served the text.
func (c *Cache) EncodeDeferredLookup(text string, addSpecial bool) (ids []uint32, commit func(), lk Lookup, err error) {
	if c.l0 != nil {
		if ids, ok := c.l0.get(text, addSpecial); ok {
			c.l0Hits.Add(1)
			return ids, noCommit, Lookup{L0Hit: true}, nil
		}
		c.l0Misses.Add(1)
	}
	var l1Insert func()
	ids, l1Insert, lk.L1HitBytes, err = c.encodeL1(text, addSpecial)
	if err != nil {
		return nil, noCommit, lk, err
	}
	var l0Put func()
	if c.l0 != nil && c.l0.fits(text, len(ids)) {
		private := slices.Clone(ids)
		l0Put = func() { c.l0.put(text, addSpecial, private) }
	}
	if l1Insert == nil && l0Put == nil {
		return ids, noCommit, lk, nil
	}
	var once sync.Once
	return ids, func() {
		once.Do(func() {
			if l1Insert != nil {
				l1Insert()
			}
			if l0Put != nil {
				l0Put()
			}
		})
	}, lk, nil
}

// noCommit is the commit of an encode that has nothing to store.
func noCommit() {}

// encodeL1 encodes text through L1: the longest cached boundary prefix is
// reused, and the rest is encoded piece by piece. insert, when not nil,
// stores the newly encoded pieces so that every boundary of text becomes a
// cached prefix too. hit is how many leading bytes came from L1.
func (c *Cache) encodeL1(text string, add bool) (ids []uint32, insert func(), hit int, err error) {
	if !c.l1On[rootIndex(add)] {
		ids, err := c.enc.Encode(text, add)
		return ids, nil, 0, err
	}
	var boundsBuf [32]int
	bounds := c.scan.boundaries(boundsBuf[:0], text)
	if len(bounds) == 0 {
		ids, err := c.enc.Encode(text, add)
		return ids, nil, 0, err
	}
	pieces := make([]string, len(bounds))
	start := 0
	for i, b := range bounds {
		pieces[i], start = text[start:b], b
	}
	tail := text[start:]

	var pathBuf [32]*l1Node
	path := c.l1.lookup(pathBuf[:0], pieces, add)
	pieceIDs := make([][]uint32, len(pieces))
	n := 0
	for i, node := range path {
		pieceIDs[i] = node.ids
		n += len(node.ids)
	}
	if len(path) > 0 {
		c.l1Hits.Add(1)
	} else {
		c.l1Misses.Add(1)
	}
	done := 0
	if len(path) > 0 {
		done = bounds[len(path)-1]
	}
	if done > 0 {
		c.l1HitBytes.Add(uint64(done))
	}
	out := make([]uint32, 0, n+(len(text)-done)/3+8)
	for _, ids := range pieceIDs[:len(path)] {
		out = append(out, ids...)
	}
	for i := len(path); i < len(pieces); i++ {
		ids, err := c.enc.Encode(pieces[i], add && i == 0)
		if err != nil {
			return nil, nil, done, err
		}
		pieceIDs[i] = ids
		out = append(out, ids...)
	}
	if tail != "" {
		ids, err := c.enc.Encode(tail, false)
		if err != nil {
			return nil, nil, done, err
		}
		out = append(out, ids...)
	}
	if len(path) < len(pieces) {
		// Cache up to the first prefix that a longer text could re-split.
		keep := len(path)
		for keep < len(pieces) && !c.scan.crossing(text[:bounds[keep]]) {
			keep++
		}
		if keep > len(path) {
			// pieceIDs holds slices that out does not share, so the
			// caller's changes to out cannot reach the cache.
			insert = func() { c.l1.insert(pieces[:keep], pieceIDs[:keep], add) }
		}
	}
	return out, insert, done, nil
}

// Stats returns a snapshot of the counters and sizes.
func (c *Cache) Stats() Stats {
	s := Stats{
		L0Hits:           c.l0Hits.Load(),
		L0Misses:         c.l0Misses.Load(),
		L1Hits:           c.l1Hits.Load(),
		L1Misses:         c.l1Misses.Load(),
		L1HitBytes:       c.l1HitBytes.Load(),
		L1Enabled:        c.l1On,
		L1DisabledReason: c.l1Reason,
	}
	if c.scan != nil {
		s.L1BoundaryTokens = c.scan.eligible
	}
	if c.l0 != nil {
		s.L0Entries, s.L0Bytes = c.l0.stats()
	}
	if c.l1 != nil {
		s.L1Entries, s.L1Bytes = c.l1.stats()
	}
	return s
}

// probeTexts are placed after a boundary token: plain words, leading spaces
// and newlines (prefix-space and "first segment" rules show up here), digits,
// accents and combining marks (normalizers), CJK, emoji and empty text.
var probeTexts = []string{
	"hello", " hello", "  hello world", "\nhello", "\n\n", " ", "", "Hello, World!",
	"123 456", "é", "e\u0301", "日本語", "🙂 ok", "\tx", "user\n", "'s",
}

// probeHeads are placed before the boundary token.
var probeHeads = []string{"", "Hi", "Hi ", "\n"}

// probe checks, for one value of add, that for a few boundary tokens s,
// Encode(h+s+t, add) == Encode(h+s, add) ++ Encode(t, false), and also with
// two boundaries in a row. It returns why L1 must stay off, or "".
func (c *Cache) probe(tokens []AddedToken, add bool) string {
	if c.scan.eligible == 0 {
		return "the tokenizer has no special token usable as a boundary"
	}
	if c.scan.singleWord(tokens) {
		return "the tokenizer has single_word added tokens, whose matching depends on the following text"
	}
	var bs []string
	for _, t := range tokens {
		if eligible(t) && !slices.Contains(bs, t.Content) {
			bs = append(bs, t.Content)
			if len(bs) == 4 {
				break
			}
		}
	}
	for _, s := range bs {
		for _, h := range probeHeads {
			for _, t := range probeTexts {
				for _, head := range []string{h + s, h + s + s} {
					if reason := c.composes(head, t, add); reason != "" {
						return reason
					}
				}
			}
		}
	}
	return ""
}

func (c *Cache) composes(head, tail string, add bool) string {
	whole, err1 := c.enc.Encode(head+tail, add)
	left, err2 := c.enc.Encode(head, add)
	right, err3 := c.enc.Encode(tail, false)
	if err := firstErr(err1, err2, err3); err != nil {
		return fmt.Sprintf("probe encode failed: %v", err)
	}
	if !slices.Equal(whole, append(slices.Clip(left), right...)) {
		return fmt.Sprintf("segments do not compose (addSpecialTokens=%v): Encode(%q) = %v, but Encode(%q) ++ Encode(%q) = %v ++ %v",
			add, head+tail, whole, head, tail, left, right)
	}
	return ""
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

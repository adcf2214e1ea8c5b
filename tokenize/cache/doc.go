// Package cache puts two exact caches in front of a tokenizer's Encode.
//
// L0 maps (text, addSpecialTokens) to ids: a sharded LRU bounded by entries
// and by accounted bytes.
//
// L1 caches the ids of text prefixes that end right after a special token
// (<|im_end|>, <|eot_id|>, <end_of_turn>, </s>, ...). A request whose text
// starts with a cached prefix only tokenizes what follows it, which is what
// makes a growing multi-turn conversation cheap: turn n+1 re-tokenizes only
// the new messages. L1 is bounded by accounted bytes and evicts LRU.
//
// # Why splitting at a special token is exact
//
// Both levels must return exactly what an uncached Encode returns. L0 is
// trivially exact. L1 relies on how a Hugging Face tokenizer treats added
// tokens: before anything else, Encode splits the raw text at occurrences of
// the added tokens that are matched on raw text (normalized == false),
// leftmost-longest. Each text segment between them is then normalized,
// pre-tokenized and run through the model on its own. So for a prefix P
// ending with such a token and any continuation B,
//
//	Encode(P+B, add) == Encode(P, add) ++ Encode(B, false)
//
// provided that:
//
//  1. the split at the end of P is still there in P+B. The scan that finds
//     boundaries is the tokenizer's own rule (leftmost-longest over every
//     raw-matched added token, special or not), run on the whole request
//     text; and a prefix is only cached when no suffix of it is a proper
//     prefix of an added token, so no continuation can form a longer token
//     across the boundary;
//  2. the boundary token does not reach into its neighbours: tokens with
//     lstrip or rstrip (which swallow adjacent whitespace), single_word (whose
//     match depends on the next character) and normalized tokens (matched
//     after normalization, inside a segment) are not boundaries, nor is a
//     token that starts or ends with whitespace. A tokenizer with any
//     raw-matched single_word token gets no L1 at all, as that flag changes
//     where the other tokens match;
//  3. nothing in the pipeline treats the first segment differently from the
//     others: a Metaspace pre-tokenizer with prepend_scheme "first", or a
//     post-processor that appends tokens at the end (EOS), or anything but a
//     prefix at the start (BOS, which Encode(P, add) carries and
//     Encode(B, false) must not). ByteLevel's add_prefix_space, the Prepend
//     normalizer and Metaspace "always" apply to every segment alike, so they
//     compose.
//
// Conditions 1 and 2 are checked from the added-token list, per text.
// Condition 3 is a property of the whole tokenizer configuration, which this
// package does not see; New checks it empirically instead: for up to four
// boundary tokens s, a set of heads h and tails t chosen to trigger each
// mechanism above (leading spaces and newlines, empty text, digits, accents
// and combining marks, CJK, emoji), it verifies
// Encode(h+s+t, add) == Encode(h+s, add) ++ Encode(t, false), also with s
// twice, separately for add = false and add = true. Any difference turns L1
// off for that value of add, and Stats says why. These mechanisms act on
// every segment or on none, so a plain word after a boundary already exposes
// them; the other probes are margin.
//
// On the five reference tokenizers (Llama 3, Qwen3, DeepSeek V3, Llama 2,
// Gemma 3) the probes pass for both values of add and L1 is on; the
// randomized multi-turn test in this package checks cached against uncached
// encodes on all five. DeepSeek V3's <｜User｜> and <｜Assistant｜> are
// normalized, non-special tokens, so there the boundaries are
// <｜begin▁of▁sentence｜> and <｜end▁of▁sentence｜> (the end of each
// assistant turn), which is what multi-turn reuse needs.
//
// # How L1 is used
//
// On Encode (after an L0 miss), the text is scanned for boundaries and cut
// into pieces that each end at one. The L1 tree is walked piece by piece; the
// ids of the matched pieces are reused, the remaining pieces and the tail are
// encoded one by one (the first piece with add, the rest without), and the
// newly encoded pieces are inserted so that every boundary prefix of this
// text is cached for the next request. A miss therefore costs about one full
// encode, as without the cache.
//
// # Memory accounting
//
// L1's bound counts, per node, the piece's text bytes, 4 bytes per id and a
// fixed overhead for the node struct, its map slot in the parent and
// allocator rounding (l1NodeOverhead), plus the children map of a node that
// has any (l1MapOverhead). Texts are copied on insert so a cached piece never
// pins the request buffer it came from. L0 counts, per entry, the text, the
// ids and l0EntryOverhead, and is bounded by both entries and those bytes.
// Both levels evict under the inserting lock, so the bounds hold at all
// times, and neither stores an entry over Config.MaxEntryBytes.
//
// Nothing is stored by EncodeDeferred until its commit is called, so a server
// can cache only the requests it has validated. The
// constants are chosen to be at or above the real heap cost;
// TestL1AccountingTracksHeap compares them with runtime.MemStats.
package cache

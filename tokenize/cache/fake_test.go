package cache

import (
	"strings"
	"sync/atomic"
)

// fakeTok is a toy tokenizer with Hugging Face's added-token semantics:
// leftmost-longest split on raw added tokens, then each segment is encoded on
// its own (one id per byte, with "he" merged, so segment edges matter). Its
// knobs reproduce the configurations under which segments do not compose.
type fakeTok struct {
	added        []AddedToken
	bos, eos     bool // post-processor adds BOS (id 1) / EOS (id 2) when add
	prependFirst bool // like Metaspace prepend_scheme "first": id 3 before the first segment only
	calls        atomic.Int64
	bytes        atomic.Int64 // text bytes encoded
}

func (f *fakeTok) Encode(text string, add bool) ([]uint32, error) {
	f.calls.Add(1)
	f.bytes.Add(int64(len(text)))
	var ids []uint32
	if add && f.bos {
		ids = append(ids, 1)
	}
	first := true
	seg := func(s string) {
		if s == "" {
			return
		}
		if first && f.prependFirst {
			ids = append(ids, 3)
		}
		first = false
		for i := 0; i < len(s); i++ {
			if strings.HasPrefix(s[i:], "he") {
				ids = append(ids, 5000)
				i++
				continue
			}
			ids = append(ids, 1000+uint32(s[i]))
		}
	}
	start := 0
	for i := 0; i < len(text); {
		best := -1
		for k, t := range f.added {
			if strings.HasPrefix(text[i:], t.Content) && (best < 0 || len(t.Content) > len(f.added[best].Content)) {
				best = k
			}
		}
		if best < 0 {
			i++
			continue
		}
		seg(text[start:i])
		ids = append(ids, f.added[best].ID)
		first = false
		i += len(f.added[best].Content)
		start = i
	}
	seg(text[start:])
	if add && f.eos {
		ids = append(ids, 2)
	}
	return ids, nil
}

func chatmlTokens() []AddedToken {
	return []AddedToken{
		{ID: 100, Content: "<|im_start|>", Special: true},
		{ID: 101, Content: "<|im_end|>", Special: true},
		{ID: 102, Content: "<think>"},                     // raw, not special: splits but is no boundary
		{ID: 103, Content: "<|im_end|>!!", Special: true}, // longer token sharing a prefix
		{ID: 104, Content: "<|sp|>", Special: true, RStrip: true},
	}
}

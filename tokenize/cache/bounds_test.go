package cache

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// bigText is a unique text of about n bytes with a boundary token every
// piece bytes, so that it feeds both levels.
func bigText(i, n, piece int) string {
	var b strings.Builder
	b.Grow(n + n/piece*12 + 16)
	fmt.Fprintf(&b, "%d:", i)
	for b.Len() < n {
		b.WriteString(strings.Repeat(string(rune('a'+i%26)), min(piece, n-b.Len())))
		b.WriteString("<|im_end|>")
	}
	return b.String()
}

// TestByteBoundsHoldAfterEveryInsert: whatever is inserted, each level's
// accounted bytes never exceed its budget, and entries over MaxEntryBytes
// are simply not cached (the defect: 150 rejected 3.9 MB prompts pinned
// 3.3 GB of an L0 bounded only by entries).
func TestByteBoundsHoldAfterEveryInsert(t *testing.T) {
	tok := &fakeTok{added: chatmlTokens()[:2]}
	cases := []struct {
		name        string
		cfg         Config
		textLen     int
		piece       int
		wantL0, wL1 bool // whether anything may be cached at all
	}{
		{"L0 alone, 60 KB texts", Config{L0Enabled: true, L0MaxBytes: 1 << 20}, 60 << 10, 1 << 20, true, false},
		{"L0 sharded", Config{L0Enabled: true, L0MaxBytes: 1 << 20, L0Shards: 8}, 20 << 10, 1 << 20, true, false},
		{"L1 alone, 4 KB pieces", Config{L1Enabled: true, L1MaxBytes: 1 << 20}, 60 << 10, 4 << 10, false, true},
		{"both levels", Config{L0Enabled: true, L0MaxBytes: 1 << 20, L1Enabled: true, L1MaxBytes: 1 << 20}, 60 << 10, 4 << 10, true, true},
		{"texts over MaxEntryBytes are not cached", Config{L0Enabled: true, L0MaxBytes: 8 << 20, L1Enabled: true, L1MaxBytes: 8 << 20, MaxEntryBytes: 64 << 10}, 100 << 10, 50 << 10, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cache := New(tok, tok.added, c.cfg)
			for i := range 200 {
				if _, err := cache.Encode(bigText(i, c.textLen, c.piece), false); err != nil {
					t.Fatal(err)
				}
				st := cache.Stats()
				if st.L0Bytes > c.cfg.L0MaxBytes || st.L1Bytes > c.cfg.L1MaxBytes {
					t.Fatalf("after %d inserts: L0 %d/%d bytes, L1 %d/%d bytes", i+1, st.L0Bytes, c.cfg.L0MaxBytes, st.L1Bytes, c.cfg.L1MaxBytes)
				}
			}
			st := cache.Stats()
			if got := st.L0Entries > 0; got != c.wantL0 {
				t.Errorf("L0 entries = %d, want cached = %v", st.L0Entries, c.wantL0)
			}
			if got := st.L1Entries > 0; got != c.wL1 {
				t.Errorf("L1 entries = %d, want cached = %v", st.L1Entries, c.wL1)
			}
		})
	}
}

// TestByteBoundHoldsOnTheHeap replays the defect at a smaller scale: many
// large unique prompts through the default per-entry limit. The heap they
// leave behind must stay near the configured budget, not grow with the
// number of prompts (100 prompts of 300 KB, with the fake tokenizer's one
// id per byte: about 150 MB if all were kept).
func TestByteBoundHoldsOnTheHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 150 MB over its run")
	}
	tok := &fakeTok{added: chatmlTokens()[:2]}
	const budget = 4 << 20
	var c *Cache
	grown := heapGrowth(func() {
		c = New(tok, tok.added, Config{L0Enabled: true, L0MaxBytes: budget, L1Enabled: true, L1MaxBytes: budget})
		for i := range 100 {
			if _, err := c.Encode(bigText(i, 300<<10, 64<<10), false); err != nil {
				t.Fatal(err)
			}
		}
	})
	st := c.Stats()
	t.Logf("heap growth %d bytes; accounted L0 %d, L1 %d", grown, st.L0Bytes, st.L1Bytes)
	if limit := uint64(2 * 2 * budget); grown > limit {
		t.Errorf("heap grew by %d bytes, want at most %d (twice the two budgets)", grown, limit)
	}
	runtime.KeepAlive(c)
}

// TestEncodeDeferred: only committed encodings are cached, commit is
// idempotent, and the caller's ids are its own.
func TestEncodeDeferred(t *testing.T) {
	tok := &fakeTok{added: chatmlTokens()[:2]}
	text := "<|im_start|>user hello<|im_end|><|im_start|>assistant"
	c := New(tok, tok.added, DefaultConfig())
	want := mustEncode(t, tok, text, false)

	ids, commit, err := c.EncodeDeferred(text, false)
	if err != nil || commit == nil || !slices.Equal(ids, want) {
		t.Fatalf("EncodeDeferred = %v, %v, commit nil: %v; want %v", ids, err, commit == nil, want)
	}
	if st := c.Stats(); st.L0Entries != 0 || st.L1Entries != 0 {
		t.Fatalf("before commit: %d L0 and %d L1 entries, want none", st.L0Entries, st.L1Entries)
	}
	if _, _, err := c.EncodeDeferred(text, false); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.L0Hits != 0 || st.L1Hits != 0 {
		t.Fatalf("an uncommitted encoding was served from the cache: %+v", st)
	}

	ids[0] = 999999 // the caller's slice; the cache must not see this
	commit()
	commit()
	st := c.Stats()
	if st.L0Entries != 1 || st.L1Entries == 0 {
		t.Fatalf("after commit: %d L0 and %d L1 entries, want 1 and some", st.L0Entries, st.L1Entries)
	}
	again, commit2, err := c.EncodeDeferred(text, false)
	if err != nil || !slices.Equal(again, want) {
		t.Fatalf("cached encode = %v, %v; want %v", again, err, want)
	}
	commit2()
	if st := c.Stats(); st.L0Hits != 1 || st.L0Entries != 1 {
		t.Errorf("want one L0 hit and one entry, got %+v", st)
	}
}

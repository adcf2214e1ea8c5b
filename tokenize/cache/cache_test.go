package cache

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

func mustEncode(t testing.TB, e Encoder, text string, add bool) []uint32 {
	t.Helper()
	ids, err := e.Encode(text, add)
	if err != nil {
		t.Fatalf("Encode(%q): %v", text, err)
	}
	return ids
}

func TestProbesDecideL1(t *testing.T) {
	tests := []struct {
		name string
		tok  *fakeTok
		want [2]bool
	}{
		{"plain", &fakeTok{added: chatmlTokens()}, [2]bool{true, true}},
		{"bos", &fakeTok{added: chatmlTokens(), bos: true}, [2]bool{true, true}},
		{"eos at end", &fakeTok{added: chatmlTokens(), bos: true, eos: true}, [2]bool{true, false}},
		{"first segment only", &fakeTok{added: chatmlTokens(), prependFirst: true}, [2]bool{false, false}},
		{"no specials", &fakeTok{added: []AddedToken{{ID: 7, Content: "<x>"}}}, [2]bool{false, false}},
		{"single_word", &fakeTok{added: append(chatmlTokens(), AddedToken{ID: 9, Content: "w", SingleWord: true})}, [2]bool{false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(tt.tok, tt.tok.added, DefaultConfig())
			st := c.Stats()
			if st.L1Enabled != tt.want {
				t.Fatalf("L1Enabled = %v, want %v (reasons %q)", st.L1Enabled, tt.want, st.L1DisabledReason)
			}
			for i, on := range st.L1Enabled {
				if !on && st.L1DisabledReason[i] == "" {
					t.Errorf("L1 off for add=%v without a reason", i == 1)
				}
			}
		})
	}
}

// randomConversation grows a ChatML-like text turn by turn, with content that
// starts or ends with spaces, sits right against the tokens, or contains a
// prefix of a token.
func randomConversation(r *rand.Rand, turns int, open, close string, bits []string) []string {
	var out []string
	var b strings.Builder
	for range turns {
		b.WriteString(open)
		for range r.IntN(6) {
			b.WriteString(bits[r.IntN(len(bits))])
		}
		b.WriteString(close)
		if r.IntN(2) == 0 {
			b.WriteString("\n")
		}
		tail := ""
		for range r.IntN(3) {
			tail += bits[r.IntN(len(bits))]
		}
		out = append(out, b.String()+tail)
	}
	return out
}

var fakeBits = []string{"hello", " he", "  ", "\n", "x", "<|im", "<|im_end", "<think>", "<|sp|>  a", "!!", "!", "日本", "🙂"}

func TestExactOnFakeTokenizers(t *testing.T) {
	toks := map[string]*fakeTok{
		"plain":      {added: chatmlTokens()[:3]},
		"bos":        {added: chatmlTokens()[:3], bos: true},
		"eos":        {added: chatmlTokens()[:3], bos: true, eos: true},
		"first":      {added: chatmlTokens()[:3], prependFirst: true},
		"crossing":   {added: chatmlTokens()},
		"all tokens": {added: chatmlTokens(), bos: true},
	}
	for name, tok := range toks {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			cfg := DefaultConfig()
			cfg.L0MaxEntries = 50
			cfg.L1MaxBytes = 20000
			c := New(tok, tok.added, cfg)
			for range 200 {
				for _, text := range randomConversation(r, 1+r.IntN(8), "<|im_start|>", "<|im_end|>", fakeBits) {
					for _, add := range []bool{false, true} {
						got := mustEncode(t, c, text, add)
						want := mustEncode(t, tok, text, add)
						if !slices.Equal(got, want) {
							t.Fatalf("Encode(%q, %v)\n got %v\nwant %v", text, add, got, want)
						}
					}
				}
			}
			st := c.Stats()
			if st.L1Enabled[0] && st.L1Hits == 0 {
				t.Errorf("L1 on but never hit: %+v", st)
			}
		})
	}
}

func TestCrossingPrefixNotCached(t *testing.T) {
	tok := &fakeTok{added: chatmlTokens()}
	c := New(tok, tok.added, DefaultConfig())
	check := func(text string) {
		t.Helper()
		if got, want := mustEncode(t, c, text, false), mustEncode(t, tok, text, false); !slices.Equal(got, want) {
			t.Fatalf("Encode(%q) = %v, want %v", text, got, want)
		}
	}
	// "a<|im_end|>" could grow into "a<|im_end|>!!", a different token.
	check("a<|im_end|>")
	check("a<|im_end|>b")
	if st := c.Stats(); st.L1Entries != 0 || st.L1Hits != 0 {
		t.Errorf("a prefix ending in a token prefix was cached: %+v", st)
	}
	check("a<|im_end|>!!b")
	check("a<|im_end|>!!c")
	if st := c.Stats(); st.L1Entries != 1 || st.L1Hits != 1 {
		t.Errorf("a<|im_end|>!! should be cached and hit once: %+v", st)
	}
	check("a<|im_end|>!")
}

func TestL1HitEncodesOnlySuffix(t *testing.T) {
	tok := &fakeTok{added: chatmlTokens()[:2], bos: true}
	c := New(tok, tok.added, Config{L1Enabled: true, L1MaxBytes: 1 << 20})
	turn1 := "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
	turn2 := turn1 + "<|im_start|>assistant\nhello<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n"
	mustEncode(t, c, turn1, true)
	tok.bytes.Store(0)
	got := mustEncode(t, c, turn2, true)
	if want := mustEncode(t, tok, turn2, true); !slices.Equal(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
	// The uncached reference encode above added len(turn2). turn1's final
	// "\n" follows its last boundary, so it is not part of the cached prefix.
	cached := len(turn1) - 1
	if n := tok.bytes.Load() - int64(len(turn2)); n != int64(len(turn2)-cached) {
		t.Errorf("tokenized %d bytes on the hit, want %d (only the suffix)", n, len(turn2)-cached)
	}
	if st := c.Stats(); st.L1Hits != 1 || st.L1Misses != 1 || st.L1HitBytes != uint64(cached) {
		t.Errorf("stats %+v", st)
	}
}

func TestL0LRU(t *testing.T) {
	tok := &fakeTok{}
	c := New(tok, nil, Config{L0Enabled: true, L0MaxEntries: 3, L0Shards: 1})
	for _, s := range []string{"a", "b", "c", "a", "d"} { // "b" is least recent when "d" arrives
		mustEncode(t, c, s, false)
	}
	calls := tok.calls.Load()
	for _, s := range []string{"a", "c", "d"} {
		mustEncode(t, c, s, false)
	}
	if tok.calls.Load() != calls {
		t.Errorf("a, c, d should all be cached")
	}
	mustEncode(t, c, "b", false)
	if tok.calls.Load() != calls+1 {
		t.Errorf("b should have been evicted")
	}
	mustEncode(t, c, "a", true) // the flag is part of the key
	st := c.Stats()
	if st.L0Entries != 3 || st.L0Hits != 4 || st.L0Misses != 6 {
		t.Errorf("stats %+v", st)
	}
	if want := 3 * (allocSize(1) + allocSize(4) + l0EntryOverhead); st.L0Bytes != want {
		t.Errorf("L0Bytes = %d, want %d", st.L0Bytes, want)
	}
}

func TestResultIsCallersCopy(t *testing.T) {
	tok := &fakeTok{added: chatmlTokens()[:2]}
	c := New(tok, tok.added, DefaultConfig())
	text := "<|im_start|>x<|im_end|>y"
	a := mustEncode(t, c, text, false)
	want := slices.Clone(a)
	a[0] = 42
	for range 2 {
		b := mustEncode(t, c, text, false) // L0 hit
		if !slices.Equal(b, want) {
			t.Fatalf("cache returned a slice the caller had modified: %v", b)
		}
		b[0] = 43
	}
	c2 := New(tok, tok.added, Config{L1Enabled: true})
	d := mustEncode(t, c2, text, false)
	d[0] = 44
	if e := mustEncode(t, c2, text, false); !slices.Equal(e, want) {
		t.Fatalf("L1 returned a slice the caller had modified: %v", e)
	}
}

func TestL1BytesBoundedAndLRU(t *testing.T) {
	tok := &fakeTok{added: chatmlTokens()[:2]}
	const limit = 64 << 10
	c := New(tok, tok.added, Config{L1Enabled: true, L1MaxBytes: limit})
	hot := "<|im_start|>system\nshared system prompt<|im_end|>"
	for i := range 2000 {
		text := fmt.Sprintf("%s<|im_start|>user\nquestion %d %s<|im_end|><|im_start|>assistant\n", hot, i, strings.Repeat("z", i%50))
		mustEncode(t, c, text, false)
		mustEncode(t, c, hot+"tail", false) // keep the shared prefix recent
		st := c.Stats()
		if st.L1Bytes > limit {
			t.Fatalf("L1Bytes %d over limit %d", st.L1Bytes, limit)
		}
	}
	st := c.Stats()
	if st.L1Bytes < limit/2 || st.L1Entries < 10 {
		t.Errorf("cache is not being filled: %+v", st)
	}
	before := st.L1Hits
	mustEncode(t, c, hot+"again", false)
	if c.Stats().L1Hits != before+1 {
		t.Errorf("the recently used shared prefix was evicted")
	}
	// Accounting is exact bookkeeping: recompute from the tree.
	var sum int64
	var walk func(n *l1Node)
	walk = func(n *l1Node) {
		for _, ch := range n.children {
			sum += ch.size
			walk(ch)
		}
	}
	for i := range c.l1.roots {
		walk(&c.l1.roots[i])
	}
	if sum != c.Stats().L1Bytes {
		t.Errorf("tree holds %d accounted bytes, counter says %d", sum, c.Stats().L1Bytes)
	}
}

func TestPieceLargerThanBudgetIsNotStored(t *testing.T) {
	tok := &fakeTok{added: chatmlTokens()[:2]}
	c := New(tok, tok.added, Config{L1Enabled: true, L1MaxBytes: 1000})
	text := "<|im_start|>" + strings.Repeat("long ", 400) + "<|im_end|>x"
	for range 2 {
		if got, want := mustEncode(t, c, text, false), mustEncode(t, tok, text, false); !slices.Equal(got, want) {
			t.Fatal("mismatch")
		}
	}
	if st := c.Stats(); st.L1Bytes > 1000 {
		t.Errorf("over budget: %+v", st)
	}
}

func TestConcurrentUse(t *testing.T) {
	tok := &fakeTok{added: chatmlTokens()[:3], bos: true}
	cfg := DefaultConfig()
	cfg.L0MaxEntries, cfg.L1MaxBytes = 64, 16<<10
	c := New(tok, tok.added, cfg)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for range 100 {
				for _, text := range randomConversation(r, 1+r.IntN(6), "<|im_start|>", "<|im_end|>", fakeBits) {
					add := r.IntN(2) == 0
					got, _ := c.Encode(text, add)
					want, _ := tok.Encode(text, add)
					if !slices.Equal(got, want) {
						t.Errorf("Encode(%q, %v) = %v, want %v", text, add, got, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

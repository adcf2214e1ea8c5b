package cache_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/tokenize"
	"github.com/kvgate/kvgate/tokenize/cache"
	"github.com/kvgate/kvgate/tokenize/internal/goldentok"
)

var goldenNames = goldentok.Names

func load(t testing.TB, name string) *tokenize.Tokenizer { return goldentok.Load(t, name) }

func addedTokens(tk *tokenize.Tokenizer) []cache.AddedToken {
	var out []cache.AddedToken
	for _, a := range tk.AddedTokens() {
		out = append(out, cache.AddedToken(a))
	}
	return out
}

// chatFormat renders one message and the generation prompt of a model family.
type chatFormat struct {
	begin  string
	turn   func(role, content string) string
	prompt string
}

var formats = map[string]chatFormat{
	"qwen3": {"", func(r, c string) string { return "<|im_start|>" + r + "\n" + c + "<|im_end|>\n" }, "<|im_start|>assistant\n"},
	"llama3": {"<|begin_of_text|>", func(r, c string) string {
		return "<|start_header_id|>" + r + "<|end_header_id|>\n\n" + c + "<|eot_id|>"
	}, "<|start_header_id|>assistant<|end_header_id|>\n\n"},
	"gemma3": {"<bos>", func(r, c string) string {
		if r == "assistant" {
			r = "model"
		}
		return "<start_of_turn>" + r + "\n" + c + "<end_of_turn>\n"
	}, "<start_of_turn>model\n"},
	"llama2": {"<s>", func(r, c string) string {
		if r == "assistant" {
			return c + "</s>"
		}
		return "[INST] " + c + " [/INST]"
	}, ""},
	"deepseek_v3": {"<｜begin▁of▁sentence｜>", func(r, c string) string {
		switch r {
		case "system":
			return c
		case "user":
			return "<｜User｜>" + c
		}
		return "<｜Assistant｜>" + c + "<｜end▁of▁sentence｜>"
	}, "<｜Assistant｜>"},
}

// contentBits are glued at random into message contents: whitespace at the
// edges, pieces of other families' tokens, token prefixes, digits, accents,
// combining marks, CJK, emoji and ZWJ sequences, code.
var contentBits = []string{
	"Hello", " world", "  ", " ", "\n", "\n\n", "\r\n", "\t", "The quick brown fox.", "don't", "I'll",
	"12345", " 3.14159", "1,000,000", "café", "e\u0301", "naïve", "日本語のテキスト", "中文", "한국어",
	"🙂", "👨‍👩‍👧‍👦", "🏳️‍🌈", "Ωμέγα", "مرحبا", "func main() {\n\treturn x\n}", "<div>", "</s", "<s",
	"<|im", "<|im_end", "<|eot_id", "<end_of", "<start_of_turn", "<｜end▁of", "▁", "<unk>", "[INST]",
	"<|im_end|>", "<|eot_id|>", "<end_of_turn>", "</s>", "<｜end▁of▁sentence｜>", "<think>", "</think>",
	"https://example.com/a?b=c", "   leading", "trailing   ", "!!!", "...", "’", "\u00a0", "\u3000",
}

func randomContent(r *rand.Rand) string {
	var b strings.Builder
	for range r.IntN(8) {
		b.WriteString(contentBits[r.IntN(len(contentBits))])
	}
	return b.String()
}

// conversationTexts grows a conversation turn by turn and returns the prompt
// text after each turn, with and without the generation prompt.
func conversationTexts(r *rand.Rand, f chatFormat, turns int) []string {
	var texts []string
	text := f.begin
	if r.IntN(2) == 0 {
		text += f.turn("system", randomContent(r))
	}
	for i := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		text += f.turn(role, randomContent(r))
		texts = append(texts, text, text+f.prompt)
	}
	return texts
}

// TestCachedEqualsUncachedOnGoldenTokenizers is the exactness proof the
// caches owe: random multi-turn conversations in every family's format (and
// in the other families' formats, whose tokens are plain text or other added
// tokens there), grown turn by turn, through small caches that evict, with
// and without special tokens added, must encode exactly as the tokenizer.
func TestCachedEqualsUncachedOnGoldenTokenizers(t *testing.T) {
	convs := 40
	if testing.Short() {
		convs = 8
	}
	for _, name := range goldenNames {
		t.Run(name, func(t *testing.T) {
			tk := load(t, name)
			cfg := cache.DefaultConfig()
			cfg.L0MaxEntries = 200
			cfg.L1MaxBytes = 256 << 10
			c := cache.New(tk, addedTokens(tk), cfg)
			st := c.Stats()
			if st.L1Enabled != [2]bool{true, true} {
				t.Fatalf("L1 should be on for %s: %q", name, st.L1DisabledReason)
			}
			r := rand.New(rand.NewPCG(7, uint64(len(name))))
			for i := range convs {
				f := formats[name]
				if i%4 == 3 { // a quarter in some other family's format
					f = formats[goldenNames[r.IntN(len(goldenNames))]]
				}
				for _, text := range conversationTexts(r, f, 1+r.IntN(10)) {
					for _, add := range []bool{false, true} {
						want, err := tk.Encode(text, add)
						if err != nil {
							t.Fatal(err)
						}
						// Twice: the second one is served by L0.
						for range 2 {
							got, err := c.Encode(text, add)
							if err != nil {
								t.Fatal(err)
							}
							if !slices.Equal(got, want) {
								t.Fatalf("Encode(%q, %v) through the cache:\n got %v\nwant %v", text, add, got, want)
							}
						}
					}
				}
			}
			st = c.Stats()
			t.Logf("%s: %+v", name, st)
			if st.L1Hits == 0 || st.L0Hits == 0 {
				t.Errorf("caches never hit: %+v", st)
			}
			if st.L1Bytes > cfg.L1MaxBytes {
				t.Errorf("L1 over budget: %d > %d", st.L1Bytes, cfg.L1MaxBytes)
			}
		})
	}
}

// tenTurns is the benchmark conversation: a system prompt and ten turns of
// ordinary chat, then the generation prompt.
func tenTurns(f chatFormat) (prefix, full string) {
	text := f.begin + f.turn("system", "You are a helpful assistant. Answer concisely, cite sources when you can, and say so when you do not know.")
	for i := range 10 {
		if i%2 == 0 {
			text += f.turn("user", fmt.Sprintf("Question %d: how does a radix tree help an LLM router decide where to send a request, and what happens when the cache on a worker is evicted? Please give an example with numbers.", i))
		} else {
			text += f.turn("assistant", strings.Repeat(fmt.Sprintf("In step %d the router matches the longest cached prefix of the prompt against each worker's tree, then weighs that match against the worker's load. ", i), 3))
		}
	}
	return text, text + f.prompt
}

// BenchmarkL1Hit encodes a 10-turn conversation whose turns are all cached in
// L1 (L0 off): only the generation prompt is tokenized.
func BenchmarkL1Hit(b *testing.B) {
	for _, name := range []string{"qwen3", "llama3"} {
		b.Run(name, func(b *testing.B) {
			tk := load(b, name)
			c := cache.New(tk, addedTokens(tk), cache.Config{L1Enabled: true, L1MaxBytes: 50 << 20})
			prefix, full := tenTurns(formats[name])
			if _, err := c.Encode(prefix, true); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(full)))
			for b.Loop() {
				if _, err := c.Encode(full, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUncached encodes the same conversation with the tokenizer alone.
func BenchmarkUncached(b *testing.B) {
	for _, name := range []string{"qwen3", "llama3"} {
		b.Run(name, func(b *testing.B) {
			tk := load(b, name)
			_, full := tenTurns(formats[name])
			b.SetBytes(int64(len(full)))
			for b.Loop() {
				if _, err := tk.Encode(full, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkL0Hit is an exact repeat, single goroutine and parallel.
func BenchmarkL0Hit(b *testing.B) {
	tk := load(b, "qwen3")
	_, full := tenTurns(formats["qwen3"])
	for _, shards := range []int{1, 4, 16} {
		c := cache.New(tk, nil, cache.Config{L0Enabled: true, L0MaxEntries: 1000, L0Shards: shards})
		texts := make([]string, 64)
		for i := range texts {
			texts[i] = fmt.Sprintf("%d %s", i, full)
			c.Encode(texts[i], true)
		}
		b.Run(fmt.Sprintf("shards=%d/serial", shards), func(b *testing.B) {
			i := 0
			for b.Loop() {
				c.Encode(texts[i%len(texts)], true)
				i++
			}
		})
		b.Run(fmt.Sprintf("shards=%d/parallel", shards), func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					c.Encode(texts[i%len(texts)], true)
					i++
				}
			})
		})
	}
}

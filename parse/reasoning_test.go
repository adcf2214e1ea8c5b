package parse

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// reasoningCases are answers written in each family's documented format.
var reasoningCases = []struct {
	name      string
	style     ReasoningStyle
	open      bool // the prompt left the block open
	answer    string
	reasoning string
	content   string
}{
	{"qwen3 thinks, then answers", Qwen3, false,
		"<think>\nThe user asks for the capital of France. That is Paris.\n</think>\n\nThe capital of France is Paris.",
		"The user asks for the capital of France. That is Paris.", "The capital of France is Paris."},
	{"qwen3 with enable_thinking false: no block", Qwen3, false,
		"The capital of France is Paris.", "", "The capital of France is Paris."},
	{"qwen3 empty block", Qwen3, false, "<think>\n\n</think>\n\nHello!", "", "Hello!"},
	{"deepseek-r1: the prompt opened the block", DeepSeekR1, true,
		"Okay, 2+2 is 4.\n</think>\n\n**4**", "Okay, 2+2 is 4.", "**4**"},
	{"qwen3 thinking-2507: the prompt opened the block", Qwen3, true,
		"Let me count: r, r, r.\n</think>\n\nThree.", "Let me count: r, r, r.", "Three."},
	{"cut off while thinking", DeepSeekR1, true, "I need to consider  \n", "I need to consider", ""},
	{"a block opened mid-answer is text", Qwen3, false,
		"Use the <think> tag like </think> this.", "", "Use the <think> tag like </think> this."},
	{"a second block is content", Qwen3, false, "<think>a</think>b<think>c</think>", "a", "b<think>c</think>"},
	{"markers inside the reasoning's text", Qwen3, false, "<think>x <thin y</thi z</think>w", "x <thin y</thi z", "w"},
	{"whitespace before the block", Qwen3, false, "\n  <think>r</think>c", "r", "c"},
	{"whitespace inside reasoning is kept", Qwen3, false, "<think>a \n b\t</think>\tc d ", "a \n b", "c d "},
	{"leading whitespace of a plain answer is kept", Qwen3, false, "  hi", "", "  hi"},
	{"only whitespace", Qwen3, false, " \n ", "", ""},
	{"a partial start marker is content", Qwen3, false, "<thi", "", "<thi"},
	{"a partial end marker is reasoning", Qwen3, true, "abc </thi", "abc </thi", ""},
	{"unicode around the markers", Qwen3, false, "<think>思考 ✓</think>答え🙂", "思考 ✓", "答え🙂"},
	{"empty answer", Qwen3, false, "", "", ""},
	{"end right away", DeepSeekR1, true, "</think>x", "", "x"},
}

// parseWhole parses answer delivered as chunks.
func parseChunks(style ReasoningStyle, open bool, chunks []string) (reasoning, content string) {
	p := NewReasoning(style, open)
	var rb, cb strings.Builder
	for _, c := range chunks {
		r, t := p.Push(c)
		rb.WriteString(r)
		cb.WriteString(t)
	}
	r, t := p.Flush()
	return rb.String() + r, cb.String() + t
}

func TestReasoningSplitsAnswers(t *testing.T) {
	for _, tc := range reasoningCases {
		t.Run(tc.name, func(t *testing.T) {
			r, c := parseChunks(tc.style, tc.open, []string{tc.answer})
			if r != tc.reasoning || c != tc.content {
				t.Fatalf("whole: reasoning %q content %q; want %q and %q", r, c, tc.reasoning, tc.content)
			}
		})
	}
}

// Every way of cutting an answer in two, and one byte at a time, and random
// cuts into many pieces, gives the same reasoning and content as the whole.
func TestReasoningIsTheSameForEveryChunking(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range reasoningCases {
		t.Run(tc.name, func(t *testing.T) {
			check := func(how string, chunks []string) {
				t.Helper()
				if r, c := parseChunks(tc.style, tc.open, chunks); r != tc.reasoning || c != tc.content {
					t.Fatalf("%s %q: reasoning %q content %q; want %q and %q", how, chunks, r, c, tc.reasoning, tc.content)
				}
			}
			for i := 0; i <= len(tc.answer); i++ {
				check("split", []string{tc.answer[:i], tc.answer[i:]})
			}
			var bytes []string
			for i := range len(tc.answer) {
				bytes = append(bytes, tc.answer[i:i+1])
			}
			check("byte by byte", bytes)
			for range 200 {
				check("random cuts", randomChunks(rng, tc.answer))
			}
		})
	}
}

// randomChunks cuts s at random byte positions, empty pieces included.
func randomChunks(rng *rand.Rand, s string) []string {
	var out []string
	for len(s) > 0 {
		n := rng.IntN(min(len(s), 9) + 1)
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

// The parser holds back no more than it must: after each delta, what it
// has not released is whitespace it may trim plus at most a marker's worth
// of bytes that may still become one.
func TestReasoningHoldsBackOnlyWhatItMust(t *testing.T) {
	answer := "<think>step one, step two</think>\n\nThe answer is forty-two, as computed above."
	p := NewReasoning(Qwen3, false)
	var content strings.Builder
	for i := range len(answer) {
		_, c := p.Push(answer[i : i+1])
		content.WriteString(c)
		if held := strings.TrimSpace(p.held); len(held) >= len(Qwen3.End) {
			t.Fatalf("after %q it holds %q", answer[:i+1], p.held)
		}
	}
	// The answer ends in neither whitespace nor a marker's start: all of
	// its content is out before Flush.
	if want := "The answer is forty-two, as computed above."; content.String() != want {
		t.Fatalf("content released while streaming: %q, want %q", content.String(), want)
	}
}

func TestOpensInPrompt(t *testing.T) {
	for _, tc := range []struct {
		prompt string
		want   bool
	}{
		{"<|im_start|>assistant\n", false},
		{"<|im_start|>assistant\n<think>\n", true},
		{"<|im_start|>assistant\n<think>\n\n</think>\n\n", false}, // enable_thinking=false
		{"<｜Assistant｜><think>\n", true},
		{"<think>old</think> user text <think>", true},
	} {
		if got := Qwen3.OpensInPrompt(tc.prompt); got != tc.want {
			t.Errorf("OpensInPrompt(%q) = %v, want %v", tc.prompt, got, tc.want)
		}
	}
}

func TestReasoningStyleNamed(t *testing.T) {
	if s, err := ReasoningStyleNamed("deepseek_r1"); err != nil || s != DeepSeekR1 {
		t.Fatalf("deepseek_r1: %v, %v", s, err)
	}
	if _, err := ReasoningStyleNamed("gpt"); err == nil || !strings.Contains(err.Error(), "qwen3, deepseek_r1") {
		t.Fatalf("unknown name: %v", err)
	}
}

// FuzzReasoningChunking: any answer cut anywhere parses as the whole does,
// and releases valid UTF-8 when given it.
func FuzzReasoningChunking(f *testing.F) {
	for _, tc := range reasoningCases {
		f.Add(tc.answer, tc.open, uint64(len(tc.answer)/2))
	}
	f.Fuzz(func(t *testing.T, answer string, open bool, seed uint64) {
		r, c := parseChunks(Qwen3, open, []string{answer})
		r2, c2 := parseChunks(Qwen3, open, randomChunks(rand.New(rand.NewPCG(seed, 7)), answer))
		if r != r2 || c != c2 {
			t.Fatalf("whole: %q %q; chunked: %q %q", r, c, r2, c2)
		}
		if utf8.ValidString(answer) && (!utf8.ValidString(r) || !utf8.ValidString(c)) {
			t.Fatalf("invalid UTF-8 out of valid input: %q %q", r, c)
		}
		if len(r)+len(c) > len(answer) {
			t.Fatalf("released more than it was given: %q %q from %q", r, c, answer)
		}
	})
}

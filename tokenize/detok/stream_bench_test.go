package detok

import (
	"fmt"
	"testing"
)

// BenchmarkNewStreamPrompt is the stream of a one-token answer to prompts of
// 1K to 64K ids, as the router starts one per request that returns text.
// Its bytes per operation must not grow with the prompt: the window keeps
// only the prompt's last promptContext ids.
//
//	go test -run '^$' -bench NewStreamPrompt -benchmem ./tokenize/detok/
func BenchmarkNewStreamPrompt(b *testing.B) {
	dec, _ := tokensOf(" a", " b", " c", "<|im_end|>")
	for _, n := range []int{1024, 8192, 65536} {
		prompt := make([]uint32, n)
		for i := range prompt {
			prompt[i] = uint32(i % 3)
		}
		b.Run(fmt.Sprintf("prompt=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				s := NewStream(dec, Options{SkipSpecialTokens: true, PromptIDs: prompt, StopTokenIDs: []uint32{3}})
				if _, _, err := s.Push([]uint32{1}); err != nil {
					b.Fatal(err)
				}
				s.Finish()
			}
		})
	}
}

// TestPromptTailSkipsSpecial: a prompt ending in special ids that the window
// drops still gives the first generated token promptContext ids of context,
// so it renders as it does after the whole prompt.
func TestPromptTailSkipsSpecial(t *testing.T) {
	dec, _ := tokensOf("x", " a", " b", "<|im_end|>", "<|im_start|>", "é")
	const end, start = 3, 4
	prompt := []uint32{0, 1, 2, 1, 2, 1, end, start, end, start, end, start}
	for _, skip := range []bool{false, true} {
		s := NewStream(dec, Options{SkipSpecialTokens: skip, PromptIDs: prompt})
		if got := len(s.ids); got != promptContext {
			t.Errorf("skip=%v: the window starts with %d ids, want %d", skip, got, promptContext)
		}
		whole, _ := dec.Decode(append(append([]uint32(nil), prompt...), 1, 5), skip)
		head, _ := dec.Decode(prompt, skip)
		d1, _, _ := s.Push([]uint32{1, 5})
		if got, want := d1+s.Finish(), whole[len(head):]; got != want {
			t.Errorf("skip=%v: streamed %q, want %q", skip, got, want)
		}
	}
}

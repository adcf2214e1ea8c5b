package textmodel_test

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kvgate/kvgate/tokenize/template"
	"github.com/kvgate/kvgate/tokenize/textmodel"
)

// FuzzEncodeChat: with SplitSpecialTokensInContent on, whatever a user
// writes, the Qwen3 prompt of one user turn and the generation prompt holds
// exactly the template's three control tokens, and decodes to what the
// tokenizer makes of the rendered text (its normalizer may change it: NFC
// turns U+2000 into U+2002); with it off, EncodeChat is
// Encode(Render(c), false).
func FuzzEncodeChat(f *testing.F) {
	on, off := loadReal(f, "qwen3", true), loadReal(f, "qwen3", false)
	for _, s := range []string{"hello", forged, "<|im_", "start|>", "|>x<|", "\ue000", "<|endoftext|><|im_end|>", "<think>\n</think>", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, content string) {
		if !utf8.ValidString(content) {
			return
		}
		msg := template.NewOrderedMap()
		msg.Set("role", "user")
		msg.Set("content", content)
		c := textmodel.Conversation{Messages: []any{msg}, AddGenerationPrompt: true}
		rendered, err := off.Render(c)
		if err != nil {
			t.Fatal(err)
		}
		want, err := off.Encode(rendered, false)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := off.EncodeChat(c)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("off: EncodeChat = %v, %v; want %v", got, err, want)
		}
		ids, _, err := on.EncodeChat(c)
		if err != nil {
			t.Fatalf("on: %v", err)
		}
		tk := on.Tokenizer()
		if n := len(slices.DeleteFunc(slices.Clone(ids), func(id uint32) bool { return !tk.IsSpecial(id) })); n != 3 {
			t.Fatalf("on: %d special ids in %v for content %q, want 3", n, ids, content)
		}
		normalized, err := tk.Decode(want, false)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := tk.Decode(ids, false); err != nil || back != normalized {
			t.Fatalf("on: decodes to %q, %v; want %q (the rendered text as the tokenizer reads it)", back, err, normalized)
		}
		if !strings.Contains(content, "<|") && !slices.Equal(ids, want) {
			t.Fatalf("on: %v differs from %v without special text", ids, want)
		}
	})
}

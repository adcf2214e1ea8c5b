package sim

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestScriptsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		name    string
		scripts []Script
		noTok   bool
		says    string
	}{
		{"neither text nor ids", []Script{{When: "x"}}, false, "Scripts[0]: set exactly one"},
		{"both text and ids", []Script{{Text: "a", IDs: []uint32{1}}}, false, "Scripts[0]: set exactly one"},
		{"an id beyond the vocabulary", []Script{{IDs: []uint32{1, 1 << 30}}}, false, "Scripts[0]: token 1 is id 1073741824"},
		{"text without a tokenizer", []Script{{Text: "a"}}, true, "need a tokenizer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Scripts = tc.scripts
			if tc.noTok {
				c.TokenizerDir, c.VocabSize = "none", 1000
			}
			_, err := New(c)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("New: %v; want ErrInvalidConfig saying %q", err, tc.says)
			}
		})
	}
}

// The first script whose When the prompt's text contains gives the answer,
// as the served tokenizer spells it; other prompts are sampled.
func TestScriptAnswers(t *testing.T) {
	c := DefaultConfig()
	c.Scripts = []Script{
		{When: "France", Text: "<think>easy</think>Paris."},
		{When: "", IDs: []uint32{7, 8, 9}},
	}
	e, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	tok := e.scripts.tok
	prompt, err := tok.Encode("<|im_start|>user\nThe capital of France?<|im_end|>\n", false)
	if err != nil {
		t.Fatal(err)
	}
	got := e.scripts.answer(prompt)
	if text, _ := tok.Decode(got, false); text != "<think>easy</think>Paris." {
		t.Fatalf("answer to France: %q", text)
	}
	other, _ := tok.Encode("hello", false)
	if got := e.scripts.answer(other); !slices.Equal(got, []uint32{7, 8, 9}) {
		t.Fatalf("answer to another prompt: %v, want the catch-all's ids", got)
	}
	var none *scripts
	if none.answer(prompt) != nil {
		t.Fatal("an engine without scripts answered from one")
	}
}

func TestReadScripts(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "s.json")
	if err := os.WriteFile(good, []byte(`[{"when": "a", "text": "b"}, {"ids": [1, 2]}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := ReadScripts(good)
	if err != nil || len(s) != 2 || s[0].When != "a" || !slices.Equal(s[1].IDs, []uint32{1, 2}) {
		t.Fatalf("ReadScripts: %+v, %v", s, err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"when": "a"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadScripts(bad); err == nil || !strings.Contains(err.Error(), "JSON list") {
		t.Fatalf("ReadScripts of an object: %v", err)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/tokenize"
)

// simTokenizer is the simulated engine's built-in tokenizer, committed in the repo.
const simTokenizer = "../../workers/sim/tokenizer"

func TestTokenizeCommand(t *testing.T) {
	tok, err := tokenize.Load(simTokenizer)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"Hello, world!", "<|im_start|>user\nhi<|im_end|>", ""}
	want := make([][]uint32, len(texts))
	for i, s := range texts {
		if want[i], err = tok.Encode(s, false); err != nil {
			t.Fatal(err)
		}
	}

	var out bytes.Buffer
	if err := runTokenize([]string{"--tokenizer", simTokenizer, texts[0]}, nil, &out, &out); err != nil {
		t.Fatal(err)
	}
	var one []uint32
	if err := json.Unmarshal(out.Bytes(), &one); err != nil || !slices.Equal(one, want[0]) {
		t.Fatalf("tokenize %q printed %s, want %v", texts[0], out.String(), want[0])
	}

	in, _ := json.Marshal(texts)
	out.Reset()
	if err := runTokenize([]string{"--tokenizer", filepath.Join(simTokenizer, "tokenizer.json"), "--batch"}, bytes.NewReader(in), &out, &out); err != nil {
		t.Fatal(err)
	}
	var many [][]uint32
	if err := json.Unmarshal(out.Bytes(), &many); err != nil || len(many) != len(texts) {
		t.Fatalf("--batch printed %s", out.String())
	}
	for i := range texts {
		if !slices.Equal(many[i], want[i]) {
			t.Errorf("--batch item %d = %v, want %v", i, many[i], want[i])
		}
	}
	if !strings.Contains(out.String(), "[]") {
		t.Errorf("the empty string's ids should print as [], got %s", out.String())
	}

	out.Reset()
	args := []string{"--tokenizer", simTokenizer, "--decode"}
	for _, id := range want[1] {
		args = append(args, jsonString(id))
	}
	if err := runTokenize(args, nil, &out, &out); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSuffix(out.String(), "\n"); got != texts[1] {
		t.Errorf("--decode printed %q, want %q", got, texts[1])
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestChatTemplateCases renders the 64 reference cases through the command
// and compares each with Python Jinja2's output.
func TestChatTemplateCases(t *testing.T) {
	const cases = "../../tokenize/template/testdata/cases.json"
	var out bytes.Buffer
	if err := runChatTemplate([]string{"--cases", cases, "--now", "2025-07-10T12:00:00Z"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	var got map[string]caseResult
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output is not JSON: %v", err)
	}
	raw, err := os.ReadFile(cases)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]struct {
		Expected string `json:"expected"`
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(want) != 64 {
		t.Fatalf("%d results for %d cases, want 64", len(got), len(want))
	}
	for name, w := range want {
		if g := got[name]; !g.OK || g.Text != w.Expected {
			t.Errorf("%s: ok=%v error=%q; text differs: %v", name, g.OK, g.Error, g.Text != w.Expected)
		}
	}
}

func TestChatTemplateWithModelAndMessages(t *testing.T) {
	dir := t.TempDir()
	msgs := filepath.Join(dir, "messages.json")
	if err := os.WriteFile(msgs, []byte(`[{"role": "user", "content": "hi"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runChatTemplate([]string{"--model-path", simTokenizer, "--messages", msgs}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if want := "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"; out.String() != want {
		t.Fatalf("rendered %q, want %q", out.String(), want)
	}
}

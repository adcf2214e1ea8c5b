package parse

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// DetectToolFormat on the real chat templates of the template package's
// golden cases (published models' tokenizer_config.json templates): each
// family that renders tool calls is read in its own format, and templates
// that render none are not guessed at.
func TestDetectToolFormatOnRealTemplates(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "tokenize", "template", "testdata", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases map[string]struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string]string{
		"Qwen/Qwen2.5-7B-Instruct":                                  "hermes",
		"Qwen/Qwen3-0.6B":                                           "hermes",
		"NousResearch/Hermes-2-Pro-Llama-3-8B (JSON Schema)":        "hermes",
		"meta-llama/Llama-3.1-8B-Instruct":                          "llama3",
		"mistralai/Mistral-Nemo-Instruct-2407":                      "mistral",
		"mistralai/Mistral-7B-Instruct-v0.3 (JSON Schema)":          "mistral",
		"deepseek-ai/DeepSeek-R1":                                   "deepseek_v3",
		"lenml:deepseek_v3":                                         "deepseek_v3",
		"HuggingFaceH4/zephyr-7b-beta (add_generation_prompt=true)": "",
		"meta-llama/Llama-3.2-11B-Vision-Instruct":                  "",
		"moonshotai/Kimi-K2-Thinking":                               "",
		"HuggingFaceTB/SmolLM3-3B":                                  "hermes",
		// <tool_call> around other formats: XML parameters, arg_key pairs.
		"Qwen/Qwen3.5-4B": "",
		"zai-org/GLM-5.1": "",
	} {
		tmpl := cases[model].ChatTemplate
		if tmpl == "" {
			t.Fatalf("no template for %s", model)
		}
		f, ok := DetectToolFormat(tmpl)
		if got := f.Name; !ok && got != "" || got != want {
			t.Errorf("%s: detected %q (%v), want %q", model, got, ok, want)
		}
	}
}

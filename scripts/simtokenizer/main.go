// Command simtokenizer writes the simulated engine's built-in tokenizer: a
// small byte-level BPE tokenizer in Hugging Face's tokenizer.json format, with
// ChatML special tokens and chat template, so that the embedded default
// accepts text and chat with no model files. It learns its merges from the
// text files given as arguments (the repository's README by default) and is
// deterministic for the same input.
//
//	go run ./scripts/simtokenizer [-merges N] [-out DIR] [FILE...]
//
// The committed tokenizer was made with
//
//	go run ./scripts/simtokenizer README.md api/proto/kvgate/v1/*.proto api/proto/sglang/grpc/scheduler/*.proto api/proto/vllm/grpc/engine/*.proto
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// The pre-tokenizer pattern Qwen's tokenizers use; kvgate's tokenizer matches
// it exactly, so the built-in tokenizer exercises the same path as a real one.
const splitPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// trainSplit approximates splitPattern with Go's regexp (no lookahead) for
// counting merges; the merges are valid whatever the split.
var trainSplit = regexp.MustCompile(`'(?:s|t|re|ve|m|ll|d)|[^\r\n\pL\pN]?\pL+|\pN| ?[^\s\pL\pN]+[\r\n]*|\s+`)

var specials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

const chatTemplate = `{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`

func main() {
	merges := flag.Int("merges", 1800, "number of merges to learn")
	out := flag.String("out", "workers/sim/tokenizer", "directory to write tokenizer.json and tokenizer_config.json into")
	flag.Parse()
	files := flag.Args()
	if len(files) == 0 {
		files = []string{"README.md"}
	}
	var corpus strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			fail(err)
		}
		corpus.Write(b)
	}
	if err := write(*out, corpus.String(), *merges); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "simtokenizer:", err)
	os.Exit(1)
}

// byteChars maps each byte to the printable rune GPT-2's byte-level encoding
// uses for it.
func byteChars() [256]string {
	var m [256]string
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[b] = string(rune(b))
		} else {
			m[b] = string(rune(256 + n))
			n++
		}
	}
	return m
}

type pair struct{ a, b string }

func write(dir, corpus string, nMerges int) error {
	bc := byteChars()
	// Words as sequences of byte-level symbols, with their counts.
	counts := map[string]int{}
	for _, w := range trainSplit.FindAllString(corpus, -1) {
		counts[w]++
	}
	type word struct {
		syms  []string
		count int
	}
	var words []word
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var syms []string
		for _, b := range []byte(k) {
			syms = append(syms, bc[b])
		}
		words = append(words, word{syms, counts[k]})
	}

	vocab := map[string]int{}
	var order []string
	add := func(tok string) {
		if _, ok := vocab[tok]; !ok {
			vocab[tok] = len(order)
			order = append(order, tok)
		}
	}
	for b := 0; b < 256; b++ {
		add(bc[b])
	}
	var merges []pair
	for len(merges) < nMerges {
		freq := map[pair]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w.syms); i++ {
				freq[pair{w.syms[i], w.syms[i+1]}] += w.count
			}
		}
		best, bestN := pair{}, 1 // a pair seen once is not worth a token
		for p, n := range freq {
			if n > bestN || (n == bestN && bestN > 1 && (p.a+" "+p.b) < (best.a+" "+best.b)) {
				best, bestN = p, n
			}
		}
		if bestN <= 1 {
			break
		}
		merges = append(merges, best)
		add(best.a + best.b)
		for i := range words {
			s := words[i].syms
			var out []string
			for j := 0; j < len(s); j++ {
				if j+1 < len(s) && s[j] == best.a && s[j+1] == best.b {
					out = append(out, best.a+best.b)
					j++
					continue
				}
				out = append(out, s[j])
			}
			words[i].syms = out
		}
	}

	type addedToken struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	var added []addedToken
	for _, s := range specials {
		added = append(added, addedToken{ID: len(order), Content: s, Special: true})
		order = append(order, s)
	}
	mergeStrs := make([]string, len(merges))
	for i, m := range merges {
		mergeStrs[i] = m.a + " " + m.b
	}
	// json.Marshal sorts map keys; the vocabulary is written in id order
	// instead so the file reads naturally.
	var vb bytes.Buffer
	vb.WriteByte('{')
	for i, tok := range order[:len(order)-len(specials)] {
		if i > 0 {
			vb.WriteByte(',')
		}
		k, _ := json.Marshal(tok)
		fmt.Fprintf(&vb, "%s:%d", k, i)
	}
	vb.WriteByte('}')

	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	tok := map[string]any{
		"version":      "1.0",
		"truncation":   nil,
		"padding":      nil,
		"added_tokens": added,
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": splitPattern}, "behavior": "Isolated", "invert": false},
			byteLevel,
		}},
		"post_processor": byteLevel,
		"decoder":        byteLevel,
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "", "end_of_word_suffix": "",
			"fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": json.RawMessage(vb.Bytes()), "merges": mergeStrs,
		},
	}
	cfg := map[string]any{
		"tokenizer_class":  "PreTrainedTokenizerFast",
		"bos_token":        nil,
		"eos_token":        "<|im_end|>",
		"pad_token":        "<|endoftext|>",
		"unk_token":        nil,
		"add_bos_token":    false,
		"chat_template":    chatTemplate,
		"model_max_length": 131072,
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, v := range map[string]any{"tokenizer.json": tok, "tokenizer_config.json": cfg} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false) // keep <|im_end|> readable
		enc.SetIndent("", " ")
		if err := enc.Encode(v); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("wrote %s: %d tokens (%d merges, %d special)\n", dir, len(order), len(merges), len(specials))
	return nil
}

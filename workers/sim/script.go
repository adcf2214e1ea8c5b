package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/kvgate/kvgate/tokenize"
)

// A Script makes the engine answer some prompts with a fixed output instead
// of a sampled one, so that tests can check what clients receive for a
// given answer (a reasoning block, a tool call) through real gRPC. The
// answer is streamed like a sampled one, ends with EOS (finish reason
// "stop"), and is cut by max_new_tokens like any other.
type Script struct {
	// When selects the prompts whose text, decoded with the served
	// tokenizer, contains it; "" matches every prompt.
	When string `json:"when"`
	// Text is the answer, tokenized with the served tokenizer (special
	// tokens in it become their ids); IDs gives it as token ids. Exactly
	// one is set.
	Text string   `json:"text,omitempty"`
	IDs  []uint32 `json:"ids,omitempty"`
}

// ReadScripts reads a JSON list of scripts, as --script takes it.
func ReadScripts(path string) ([]Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s []Script
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: a JSON list of {\"when\", \"text\" or \"ids\"}: %w", path, err)
	}
	return s, nil
}

// scripts are the compiled scripts of an engine.
type scripts struct {
	tok     *tokenize.Tokenizer // decodes prompts; nil when no script has When
	when    []string
	answers [][]uint32
}

// compileScripts tokenizes the scripts' texts and checks their ids against
// the vocabulary; nil when there are none.
func compileScripts(list []Script, served *servedTokenizer, vocab int) (*scripts, error) {
	if len(list) == 0 {
		return nil, nil
	}
	s := &scripts{}
	needText := false
	for _, sc := range list {
		needText = needText || sc.When != "" || sc.Text != ""
	}
	if needText {
		if served == nil {
			return nil, fmt.Errorf("%w: Scripts with text need a tokenizer (TokenizerDir is \"none\")", ErrInvalidConfig)
		}
		tok, err := tokenize.FromJSON(served.json, served.config)
		if err != nil {
			return nil, fmt.Errorf("%w: Scripts: the served tokenizer: %v", ErrInvalidConfig, err)
		}
		s.tok = tok
	}
	for i, sc := range list {
		ids := sc.IDs
		switch {
		case (sc.Text == "") == (len(sc.IDs) == 0):
			return nil, fmt.Errorf("%w: Scripts[%d]: set exactly one of text and ids", ErrInvalidConfig, i)
		case sc.Text != "":
			var err error
			if ids, err = s.tok.Encode(sc.Text, false); err != nil {
				return nil, fmt.Errorf("%w: Scripts[%d].text: %v", ErrInvalidConfig, i, err)
			}
		}
		for j, id := range ids {
			if int(id) >= vocab {
				return nil, fmt.Errorf("%w: Scripts[%d]: token %d is id %d, beyond the vocabulary (%d)", ErrInvalidConfig, i, j, id, vocab)
			}
		}
		s.when = append(s.when, sc.When)
		s.answers = append(s.answers, ids)
	}
	return s, nil
}

// answer is the scripted answer to prompt, nil when no script matches.
func (s *scripts) answer(prompt []uint32) []uint32 {
	if s == nil {
		return nil
	}
	text := ""
	if s.tok != nil {
		text, _ = s.tok.Decode(prompt, false) // ids beyond the vocabulary were refused before
	}
	for i, w := range s.when {
		if strings.Contains(text, w) {
			return s.answers[i]
		}
	}
	return nil
}

// scriptsFlag is --script: a file of scripts, read when the flag is parsed.
type scriptsFlag struct {
	scripts *[]Script
	path    string
}

func (f *scriptsFlag) String() string {
	if f == nil {
		return ""
	}
	return f.path
}

func (f *scriptsFlag) Set(path string) error {
	s, err := ReadScripts(path)
	if err != nil {
		return err
	}
	*f.scripts, f.path = s, path
	return nil
}

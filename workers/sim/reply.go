package sim

// Reply modes. A simulated engine has no model, so its answer is made up;
// how it is made up decides what a person trying kvgate sees. Random token
// ids (the default, which benchmarks rely on: answers of ~64 tokens on
// average whatever the prompt) decode to gibberish that reads like a
// detokenizer bug. An echo of the prompt's last user message reads as what it
// is, a stand-in for a model, and is the same for the same prompt, so a
// newcomer can tell the router's text path works. Scripts (Config.Scripts)
// win over either mode.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kvgate/kvgate/tokenize"
)

// Reply modes for Config.Reply.
const (
	// ReplyRandom samples token ids (see sampler): the latency and length
	// model benchmarks are calibrated with.
	ReplyRandom = "random"
	// ReplyEcho answers with the text of the prompt's last user message (a
	// chat prompt's last user turn; a plain prompt's whole text), then EOS,
	// cut by max_new_tokens like any answer. Where EOS may not come yet
	// (ignore_eos, or before min_new_tokens) the echo starts over, so
	// clients that ask for a fixed length get it.
	ReplyEcho = "echo"
)

// replyFlag is --reply: one of the reply modes.
type replyFlag struct{ mode *string }

func (f replyFlag) String() string {
	if f.mode == nil || *f.mode == "" {
		return ReplyRandom
	}
	return *f.mode
}

func (f replyFlag) Set(s string) error {
	if s != ReplyRandom && s != ReplyEcho {
		return fmt.Errorf("want %s or %s, got %q", ReplyRandom, ReplyEcho, s)
	}
	*f.mode = s
	return nil
}

// echoAnswer is the echo mode's answer to prompt: the last user message,
// re-encoded with the served tokenizer. Without a tokenizer the engine cannot
// read the prompt, so it repeats the prompt's ids.
func (e *Engine) echoAnswer(prompt []uint32) []uint32 {
	if e.encoder == nil {
		return slices.Clone(prompt)
	}
	tok, err := e.encoder()
	if err != nil {
		return slices.Clone(prompt) // the served tokenizer loaded at start; this cannot fail after
	}
	ids, err := tok.Encode(lastUserText(tok, prompt), false)
	if err != nil {
		return slices.Clone(prompt)
	}
	// A configured VocabSize may be below the tokenizer's: an id beyond it
	// would be out of the engine's vocabulary, so it is left out.
	ids = slices.DeleteFunc(ids, func(id uint32) bool { return int(id) >= e.cfg.VocabSize })
	if ids == nil {
		ids = []uint32{} // an empty answer (EOS at once), not "no script"
	}
	return ids
}

// lastUserText finds the last user message of a prompt rendered by a chat
// template, by its role header: a run of ordinary tokens between special
// tokens that reads "user\n<message>" (ChatML, Gemma), or "user" followed by
// the message in the next run (Llama 3's <|start_header_id|>user<|end_header_id|>).
// A prompt with no such header (plain text, token ids) is echoed whole.
func lastUserText(tok *tokenize.Tokenizer, prompt []uint32) string {
	var runs []string
	start := 0
	for i := 0; i <= len(prompt); i++ {
		if i < len(prompt) && !tok.IsSpecial(prompt[i]) {
			continue
		}
		if i > start {
			text, err := tok.Decode(prompt[start:i], true)
			if err == nil {
				runs = append(runs, text)
			}
		}
		start = i + 1
	}
	for i := len(runs) - 1; i >= 0; i-- {
		run := strings.TrimLeft(runs[i], " \t\n")
		if run == "user" || strings.TrimSpace(run) == "user" {
			if i+1 < len(runs) {
				return strings.TrimSpace(runs[i+1])
			}
			return ""
		}
		if msg, ok := strings.CutPrefix(run, "user\n"); ok {
			return strings.TrimSpace(msg)
		}
	}
	return strings.TrimSpace(strings.Join(runs, ""))
}

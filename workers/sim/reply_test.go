package sim

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/tokenize"
)

// builtinTok is the tokenizer the engine serves by default, for tests that
// write prompts as text and read answers as text.
func builtinTok(t *testing.T) *tokenize.Tokenizer {
	t.Helper()
	st, err := loadTokenizer("")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenize.FromJSON(st.json, st.config)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// With Reply "echo", an engine answers the last user message of a chat
// prompt (or a plain prompt's text), the same every time, then EOS; cut by
// max_new_tokens like any answer; a script still wins.
func TestReplyEcho(t *testing.T) {
	tok := builtinTok(t)
	for _, tc := range []struct {
		name      string
		prompt    string
		maxNew    uint32
		minNew    uint32
		ignoreEOS bool
		want      string // the echo; repeated up to maxNew when reason is "length"
		reason    string
	}{
		{"chat: the last user turn", "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nFirst question?<|im_end|>\n" +
			"<|im_start|>assistant\nAn answer.<|im_end|>\n<|im_start|>user\nWhat is a KV cache?<|im_end|>\n<|im_start|>assistant\n",
			64, 0, false, "What is a KV cache?", "stop"},
		{"plain text: all of it", "  Once upon a time, a router  ", 64, 0, false, "Once upon a time, a router", "stop"},
		{"chat without a user turn: its text", "<|im_start|>system\nBe brief.<|im_end|>\n", 64, 0, false, "system\nBe brief.", "stop"},
		{"cut by max_new_tokens", "<|im_start|>user\nan answer longer than three tokens<|im_end|>\n", 3, 0, false, "an answer longer than three tokens", "length"},
		{"ignore_eos: repeated up to max_new_tokens", "<|im_start|>user\nagain<|im_end|>\n", 20, 0, true, "again", "length"},
		{"min_new_tokens: repeated up to it, then EOS", "<|im_start|>user\nagain<|im_end|>\n", 20, 9, false, "again", "stop"},
		{"scripted prompts keep their script", "<|im_start|>user\nThe capital of France?<|im_end|>\n", 64, 0, false, "Paris.", "stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachProtocol(t, func(c *Config) {
				c.TokenizerDir, c.VocabSize, c.EOSTokenID = "", 0, 0
				c.Reply = ReplyEcho
				c.Scripts = []Script{{When: "France", Text: "Paris."}}
			}, func(t *testing.T, _ *Process, c client) {
				prompt, err := tok.Encode(tc.prompt, false)
				if err != nil {
					t.Fatal(err)
				}
				echo, _ := tok.Encode(tc.want, false)
				n := len(echo) // tokens before EOS
				switch {
				case tc.reason == "length":
					n = int(tc.maxNew)
				case tc.minNew > 0:
					n = max(n, int(tc.minNew))
				}
				var want []uint32
				for i := range n {
					want = append(want, echo[i%len(echo)])
				}
				if tc.reason != "length" {
					eos, _ := tok.TokenToID("<|im_end|>")
					want = append(want, eos)
				}
				for range 2 { // the same answer each time
					r := mustComplete(t, c, genParams{prompt: prompt, maxNew: u32(tc.maxNew), minNew: tc.minNew, ignoreEOS: tc.ignoreEOS})
					got := r.streamed()
					text, _ := tok.Decode(got, true)
					if !slices.Equal(got, want) || r.final.finishReason != tc.reason {
						t.Fatalf("answer %q (%v), finish %q; want %q, %q", text, got, r.final.finishReason, tc.want, tc.reason)
					}
				}
			})
		})
	}
}

// Without a tokenizer the engine cannot read the prompt: echo repeats its ids.
// (testConfig serves none, with EOS 128001.)
func TestReplyEchoWithoutTokenizer(t *testing.T) {
	forEachProtocol(t, func(c *Config) { c.Reply = ReplyEcho }, func(t *testing.T, _ *Process, c client) {
		prompt := []uint32{5, 6, 7, 8}
		r := mustComplete(t, c, genParams{prompt: prompt, maxNew: u32(16)})
		if got := r.streamed(); !slices.Equal(got, append(prompt, 128001)) || r.final.finishReason != "stop" {
			t.Fatalf("answer %v, finish %q; want the prompt's ids, EOS, stop", got, r.final.finishReason)
		}
	})
}

// The default stays random: what benchmarks were calibrated with.
func TestReplyDefaultIsRandom(t *testing.T) {
	if got := DefaultConfig().Reply; got != ReplyRandom {
		t.Fatalf("DefaultConfig().Reply = %q, want %q", got, ReplyRandom)
	}
	forEachProtocol(t, nil, func(t *testing.T, _ *Process, c client) {
		prompt := []uint32{5, 6, 7, 8}
		r := mustComplete(t, c, genParams{prompt: prompt, maxNew: u32(16), minNew: 16})
		if got := r.streamed(); len(got) != 16 || slices.Equal(got[:4], prompt) {
			t.Fatalf("random reply %v: want 16 sampled tokens, not an echo", got)
		}
	})
}

func TestReplyIsChecked(t *testing.T) {
	c := DefaultConfig()
	c.Reply = "parrot"
	if _, err := New(c); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), `Reply must be "random" or "echo", got "parrot"`) {
		t.Fatalf("New with Reply parrot: %v", err)
	}
	for _, tc := range []struct {
		arg, want, err string
	}{
		{"echo", ReplyEcho, ""},
		{"random", ReplyRandom, ""},
		{"parrot", "", `want random or echo, got "parrot"`},
	} {
		cfg := DefaultConfig()
		fs := flag.NewFlagSet("sim", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.RegisterFlags(fs)
		err := fs.Parse([]string{"--reply", tc.arg})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("--reply %s: %v, want an error saying %q", tc.arg, err, tc.err)
			}
			continue
		}
		if err != nil || cfg.Reply != tc.want {
			t.Errorf("--reply %s: Reply %q, %v", tc.arg, cfg.Reply, err)
		}
	}
}

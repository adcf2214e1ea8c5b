package detok_test

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kvgate/kvgate/tokenize"
	"github.com/kvgate/kvgate/tokenize/detok"
	"github.com/kvgate/kvgate/tokenize/internal/goldentok"
)

var goldenNames = goldentok.Names

func load(t testing.TB, name string) *tokenize.Tokenizer { return goldentok.Load(t, name) }

// corpus is the tokenizer parity corpus plus chat-shaped texts with special
// tokens of every family in them.
func corpus(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "corpus.json"))
	if err != nil {
		t.Fatalf("corpus: %v (run make testdata)", err)
	}
	var texts []string
	if err := json.Unmarshal(b, &texts); err != nil {
		t.Fatalf("corpus: %v", err)
	}
	return append(texts,
		"<|im_start|>user\nHi 日本<|im_end|>\n<|im_start|>assistant\n  Hello 🙂 there<|im_end|>",
		"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nCafé<|eot_id|> after",
		"<bos><start_of_turn>model\n한국어 and 👨‍👩‍👧<end_of_turn>\n tail",
		"<s>[INST] What is 2+2? [/INST] 4</s> next",
		"<｜begin▁of▁sentence｜>sys<｜User｜>q<｜Assistant｜>a<｜end▁of▁sentence｜>",
	)
}

// streamAll pushes ids in random chunks (1 to 4 ids) and checks every delta.
func streamAll(t *testing.T, d detok.Decoder, ids []uint32, opts detok.Options, r *rand.Rand) (string, *detok.Detokenizer) {
	t.Helper()
	s := detok.NewStream(d, opts)
	var out strings.Builder
	for i := 0; i < len(ids); {
		n := min(len(ids)-i, 1+r.IntN(4))
		delta, stopped, err := s.Push(ids[i : i+n])
		if err != nil {
			t.Fatal(err)
		}
		if !utf8.ValidString(delta) {
			t.Fatalf("delta %q is not valid UTF-8", delta)
		}
		out.WriteString(delta)
		i += n
		if stopped {
			break
		}
	}
	out.WriteString(s.Finish())
	return out.String(), s
}

// TestDeltasConcatenateToDecode: on every golden tokenizer, for the corpus,
// streamed deltas (in random chunks, with and without skipping special
// tokens) concatenate to Decode of all ids, and never show a replacement
// character that Decode does not have (a character split across tokens).
func TestDeltasConcatenateToDecode(t *testing.T) {
	texts := corpus(t)
	for _, name := range goldenNames {
		t.Run(name, func(t *testing.T) {
			tk := load(t, name)
			r := rand.New(rand.NewPCG(3, uint64(len(name))))
			for _, text := range texts {
				ids, err := tk.Encode(text, true)
				if err != nil {
					continue // invalid UTF-8 cases of the corpus
				}
				for _, skip := range []bool{false, true} {
					want, err := tk.Decode(ids, skip)
					if err != nil {
						t.Fatal(err)
					}
					got, _ := streamAll(t, tk, ids, detok.Options{SkipSpecialTokens: skip}, r)
					if got != want {
						t.Fatalf("text %q skip=%v ids %v:\nstreamed %q\n  decode %q", text, skip, ids, got, want)
					}
				}
			}
		})
	}
}

// TestOneTokenAtATimeNeverSplitsCharacters checks the deltas themselves on
// byte-fallback and byte-level streams of multi-byte text: no delta carries a
// U+FFFD when the whole text has none.
func TestOneTokenAtATimeNeverSplitsCharacters(t *testing.T) {
	text := "日本語のテキスト 🙂 👨‍👩‍👧‍👦 한국어 Ωμέγα café e\u0301 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ☃"
	for _, name := range goldenNames {
		t.Run(name, func(t *testing.T) {
			tk := load(t, name)
			ids, err := tk.Encode(text, false)
			if err != nil {
				t.Fatal(err)
			}
			s := detok.NewStream(tk, detok.Options{})
			var out string
			held := 0
			for _, id := range ids {
				delta, _, err := s.Push([]uint32{id})
				if err != nil {
					t.Fatal(err)
				}
				if strings.ContainsRune(delta, utf8.RuneError) {
					t.Fatalf("delta %q splits a character", delta)
				}
				if delta == "" {
					held++
				}
				out += delta
			}
			out += s.Finish()
			if want, _ := tk.Decode(ids, false); out != want {
				t.Fatalf("streamed %q, want %q", out, want)
			}
			t.Logf("%d ids, %d pushes held text back", len(ids), held)
		})
	}
}

// partialIDs lists the ids that alone decode to U+FFFD: byte tokens and
// pieces of multi-byte characters.
func partialIDs(tk *tokenize.Tokenizer) []uint32 {
	var out []uint32
	for id := range uint32(tk.VocabSize()) {
		if s, err := tk.Decode([]uint32{id}, false); err == nil && strings.ContainsRune(s, utf8.RuneError) {
			out = append(out, id)
		}
	}
	return out
}

// TestRandomIDStreams feeds ids drawn at random from the whole vocabulary,
// half of them pieces of characters, so most streams hold invalid UTF-8: the
// stream must not fail and must emit valid UTF-8; where Decode's text is
// valid (no U+FFFD) the deltas must add up to it. Where it is not, a stream
// cannot always agree (see the package doc) and the test counts those.
func TestRandomIDStreams(t *testing.T) {
	for _, name := range goldenNames {
		t.Run(name, func(t *testing.T) {
			tk := load(t, name)
			partial := partialIDs(tk)
			r := rand.New(rand.NewPCG(11, uint64(len(name))))
			differ, invalid := 0, 0
			for range 400 {
				ids := make([]uint32, 1+r.IntN(40))
				for i := range ids {
					if r.IntN(2) == 0 && len(partial) > 0 {
						ids[i] = partial[r.IntN(len(partial))]
					} else {
						ids[i] = uint32(r.IntN(tk.VocabSize()))
					}
				}
				skip := r.IntN(2) == 0
				want, err := tk.Decode(ids, skip)
				if err != nil {
					continue // holes in the id space
				}
				got, _ := streamAll(t, tk, ids, detok.Options{SkipSpecialTokens: skip}, r)
				if !strings.ContainsRune(want, utf8.RuneError) {
					if got != want {
						t.Fatalf("ids %v skip=%v:\nstreamed %q\n  decode %q", ids, skip, got, want)
					}
					continue
				}
				invalid++
				if got != want {
					differ++
				}
			}
			t.Logf("%d partial ids; of %d invalid streams, %d rendered differently from Decode", len(partial), invalid, differ)
		})
	}
}

// TestPromptContext: with the prompt as context, the deltas are what the
// generated ids add to the decoded prompt (SentencePiece keeps the leading
// space of the first generated word).
func TestPromptContext(t *testing.T) {
	for _, name := range goldenNames {
		t.Run(name, func(t *testing.T) {
			tk := load(t, name)
			prompt, _ := tk.Encode("<s>[INST] Say hi in Japanese [/INST]", true)
			gen, _ := tk.Encode("Sure: 日本語 🙂 done.", false)
			for _, skip := range []bool{false, true} {
				all := append(append([]uint32(nil), prompt...), gen...)
				whole, _ := tk.Decode(all, skip)
				head, _ := tk.Decode(prompt, skip)
				if !strings.HasPrefix(whole, head) {
					t.Fatalf("decoded prompt %q is not a prefix of %q", head, whole)
				}
				got, _ := streamAll(t, tk, gen, detok.Options{SkipSpecialTokens: skip, PromptIDs: prompt}, rand.New(rand.NewPCG(1, 1)))
				if want := whole[len(head):]; got != want {
					t.Errorf("skip=%v: streamed %q, want %q", skip, got, want)
				}
			}
		})
	}
}

// TestStopStringsOnRealStreams picks stop strings out of the decoded text and
// checks the output ends right before (or after, with NoStopTrim) their first
// occurrence, however the ids are chunked.
func TestStopStringsOnRealStreams(t *testing.T) {
	texts := corpus(t)
	for _, name := range goldenNames {
		t.Run(name, func(t *testing.T) {
			tk := load(t, name)
			r := rand.New(rand.NewPCG(5, uint64(len(name))))
			checked := 0
			for _, text := range texts {
				ids, err := tk.Encode(text, false)
				if err != nil || len(ids) < 3 {
					continue
				}
				full, _ := tk.Decode(ids, true)
				runes := []rune(full)
				if len(runes) < 3 {
					continue
				}
				i := r.IntN(len(runes) - 1)
				j := i + 1 + r.IntN(min(6, len(runes)-i-1))
				stop := string(runes[i:j])
				at := strings.Index(full, stop)
				for _, keep := range []bool{false, true} {
					got, s := streamAll(t, tk, ids, detok.Options{SkipSpecialTokens: true, StopStrings: []string{"\x00never", stop}, NoStopTrim: keep}, r)
					want := full[:at]
					if keep {
						want = full[:at+len(stop)]
					}
					if got != want {
						t.Fatalf("text %q stop %q keep=%v: got %q want %q", text, stop, keep, got, want)
					}
					if m, _ := s.Matched(); m != stop {
						t.Fatalf("matched %q, want %q", m, stop)
					}
				}
				checked++
			}
			if checked < 100 {
				t.Errorf("only %d texts checked", checked)
			}
		})
	}
}

// countingDecoder counts the ids decoded, to check the cost is linear.
type countingDecoder struct {
	detok.Decoder
	ids int
}

func (c *countingDecoder) Decode(ids []uint32, skip bool) (string, error) {
	c.ids += len(ids)
	return c.Decoder.Decode(ids, skip)
}

func TestCostIsLinear(t *testing.T) {
	tk := load(t, "llama3")
	long, err := os.ReadFile(filepath.Join("..", "testdata", "long-64k.txt"))
	if err != nil {
		t.Fatalf("%v (run make testdata)", err)
	}
	ids, _ := tk.Encode(string(long), false)
	cd := &countingDecoder{Decoder: tk}
	s := detok.NewStream(cd, detok.Options{StopStrings: []string{"\x00"}})
	var out strings.Builder
	for _, id := range ids {
		d, _, _ := s.Push([]uint32{id})
		out.WriteString(d)
	}
	out.WriteString(s.Finish())
	if want, _ := tk.Decode(ids, false); out.String() != want {
		t.Fatal("64 KB document streamed differently from Decode")
	}
	if perID := float64(cd.ids) / float64(len(ids)); perID > 6 {
		t.Errorf("decoded %.1f ids per id streamed; want a small constant", perID)
	} else {
		t.Logf("%d ids, %.2f ids decoded per id", len(ids), perID)
	}
}

// TestKeepSpecial: with SkipSpecialTokens, the kept special ids' text stays
// (a tool-call parser's markers) while every other special token is dropped,
// exactly as decoding the ids without the dropped ones renders them.
func TestKeepSpecial(t *testing.T) {
	tk := load(t, "qwen3")
	im, ok := tk.TokenToID("<|im_start|>")
	if !ok || !tk.IsSpecial(im) {
		t.Fatal("<|im_start|> is not a special token of qwen3")
	}
	text := "<|im_start|>assistant\nCall<|im_end|> then <|im_start|>again 日本<|im_end|>"
	ids, err := tk.Encode(text, false)
	if err != nil {
		t.Fatal(err)
	}
	var kept []uint32
	for _, id := range ids {
		if !tk.IsSpecial(id) || id == im {
			kept = append(kept, id)
		}
	}
	want, err := tk.Decode(kept, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(want, "<|im_start|>") || strings.Contains(want, "<|im_end|>") {
		t.Fatalf("the expectation itself is wrong: %q", want)
	}
	r := rand.New(rand.NewPCG(5, 7))
	for range 20 {
		got, _ := streamAll(t, tk, ids, detok.Options{SkipSpecialTokens: true, KeepSpecial: []uint32{im}}, r)
		if got != want {
			t.Fatalf("streamed %q, want %q", got, want)
		}
	}
}

package realengine_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/internal/testutil"
)

// greedy asks for n tokens, never ending early, so that both engines (same
// weights) give the same ones.
func greedy(n uint32) *kvgatev1.SamplingParams {
	return &kvgatev1.SamplingParams{Temperature: proto.Float32(0), MaxNewTokens: proto.Uint32(n), IgnoreEos: true}
}

func TestDetectsVLLMAndItsModel(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	ws, err := s.admin.ListWorkers(ctx, &kvgatev1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range ws.GetWorkers() {
		if w.GetAddress() != s.engines[i].url() || w.GetProtocol() != kvgatev1.Protocol_PROTOCOL_VLLM || w.GetModel() != modelName {
			t.Errorf("worker %d: %s %v model %q; want %s, vLLM, %q", i, w.GetAddress(), w.GetProtocol(), w.GetModel(), s.engines[i].url(), modelName)
		}
	}

	// What the engine reports about the model is what the files say.
	var cfg struct {
		VocabSize  int `json:"vocab_size"`
		MaxPos     int `json:"max_position_embeddings"`
		EOSTokenID int `json:"eos_token_id"`
	}
	raw, err := os.ReadFile(filepath.Join(s.model, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	mi, err := s.engines[0].client.GetModelInfo(ctx, &vllm.GetModelInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if int(mi.GetVocabSize()) != cfg.VocabSize || cfg.VocabSize != vocabSize {
		t.Errorf("engine's vocab_size %d, config %d, want %d", mi.GetVocabSize(), cfg.VocabSize, vocabSize)
	}
	if mi.GetMaxContextLength() != 4096 {
		t.Errorf("engine's max_context_length %d, want the --max-model-len 4096", mi.GetMaxContextLength())
	}
	if !slices.Contains(mi.GetEosTokenIds(), int32(imEnd)) {
		t.Errorf("engine's eos_token_ids %v lack <|im_end|> %d", mi.GetEosTokenIds(), imEnd)
	}

	// kvgate holds prompts to that vocabulary and context: an id the engine
	// cannot embed, or a prompt longer than its context, is the client's
	// mistake, refused before any engine sees it.
	for _, tc := range []struct {
		name string
		ids  []uint32
	}{
		{"id past the vocabulary", []uint32{1, 2, vocabSize}},
		{"prompt past the context", randomIDs(1, 4097)},
	} {
		_, err := s.generate(ctx, &kvgatev1.GenerateRequest{InputIds: tc.ids, SamplingParams: greedy(1)})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", tc.name, err)
		}
	}

	// The page size is the engines' block size, which kvgate, given no
	// --block-size, learns from their GetServerInfo.
	si, err := s.engines[0].client.GetServerInfo(ctx, &vllm.GetServerInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if si.GetBlockSize() != blockSize {
		t.Errorf("engine's GetServerInfo block_size %d, want its --block-size %d", si.GetBlockSize(), blockSize)
	}
	for _, w := range ws.GetWorkers() {
		if w.GetPageSize() != blockSize {
			t.Errorf("worker %s: ListWorkers page_size %d, want the engine's block size %d", w.GetAddress(), w.GetPageSize(), blockSize)
		}
	}
	ms, err := s.admin.ListModels(ctx, &kvgatev1.ListModelsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms.GetModels()) != 1 || ms.GetModels()[0].GetPageSize() != blockSize {
		t.Errorf("ListModels %v, want one model paged by %d", ms.GetModels(), blockSize)
	}

	// The mirror of each engine's cache follows its events, which needs
	// blocks of the tree's page size: a block of another size would leave
	// the worker approximate.
	testutil.EventuallyState(t, time.Minute, "both workers on KV events", func() (bool, string) {
		ws, err := s.admin.ListWorkers(ctx, &kvgatev1.ListWorkersRequest{})
		if err != nil {
			return false, err.Error()
		}
		for _, w := range ws.GetWorkers() {
			if ev := w.GetKvEvents(); ev.GetMode() != "events" || !ev.GetConnected() {
				return false, ev.String()
			}
		}
		return true, ""
	})
}

// TestTokenizerComesFromTheEngine: kvgate was started without a tokenizer
// and uses the one GetTokenizer sends, which is the model directory's.
func TestTokenizerComesFromTheEngine(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := s.engines[1].client.GetTokenizer(ctx, &smgcommon.GetTokenizerRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var archive bytes.Buffer
	for {
		c, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		archive.Write(c.GetData())
	}
	zr, err := zip.NewReader(bytes.NewReader(archive.Bytes()), int64(archive.Len()))
	if err != nil {
		t.Fatalf("GetTokenizer's %d bytes are not a zip: %v", archive.Len(), err)
	}
	want, err := os.ReadFile(filepath.Join(s.model, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range zr.File {
		if filepath.Base(f.Name) != "tokenizer.json" {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		found = bytes.Equal(got, want)
	}
	if !found {
		t.Fatalf("GetTokenizer's archive has no tokenizer.json equal to the model's: %d files", len(zr.File))
	}
}

// TestGenerate: ids or text, streamed or not, kvgate relays what the engine
// produced, and its text is what transformers makes of the same ids.
func TestGenerate(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const text = "The capital of France is"
	ids := randomIDs(2, 40)
	cases := []struct {
		name   string
		req    *kvgatev1.GenerateRequest
		stream bool
	}{
		{"ids, streamed", &kvgatev1.GenerateRequest{InputIds: ids, Stream: true}, true},
		{"ids, whole", &kvgatev1.GenerateRequest{InputIds: ids}, false},
		{"text, streamed", &kvgatev1.GenerateRequest{Text: text, Stream: true}, true},
		{"text, whole", &kvgatev1.GenerateRequest{Text: text}, false},
	}
	results := make([]result, len(cases))
	for i, tc := range cases {
		tc.req.SamplingParams = greedy(8)
		r, err := s.generate(ctx, tc.req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		c := r.complete
		if len(c.GetOutputIds()) != 8 || c.GetUsage().GetCompletionTokens() != 8 || c.GetFinishReason() != kvgatev1.FinishReason_FINISH_REASON_LENGTH {
			t.Errorf("%s: %d ids, usage %v, %v; want 8 tokens ending at the length", tc.name, len(c.GetOutputIds()), c.GetUsage(), c.GetFinishReason())
		}
		if tc.stream && !slices.Equal(r.streamedIDs(), c.GetOutputIds()) {
			t.Errorf("%s: streamed %v, completion says %v", tc.name, r.streamedIDs(), c.GetOutputIds())
		}
		if !tc.stream && len(r.chunks) != 0 {
			t.Errorf("%s: %d chunks without stream", tc.name, len(r.chunks))
		}
		results[i] = r
	}
	// The same prompt, greedily, gives the same tokens streamed or not.
	if !slices.Equal(results[0].complete.GetOutputIds(), results[1].complete.GetOutputIds()) ||
		!slices.Equal(results[2].complete.GetOutputIds(), results[3].complete.GetOutputIds()) {
		t.Errorf("streaming changed the greedy output: %v %v, %v %v", results[0].complete.GetOutputIds(),
			results[1].complete.GetOutputIds(), results[2].complete.GetOutputIds(), results[3].complete.GetOutputIds())
	}

	ref := s.reference(t, referenceRequest{Texts: []string{text}, Decode: [][]uint32{results[0].complete.GetOutputIds(), results[2].complete.GetOutputIds()}})
	if got := results[2].complete.GetUsage().GetPromptTokens(); int(got) != len(ref.Texts[0]) {
		t.Errorf("text prompt: %d prompt tokens, transformers encodes %d (%v)", got, len(ref.Texts[0]), ref.Texts[0])
	}
	for i, r := range []result{results[0], results[2]} {
		if r.complete.GetText() != ref.Decode[i] {
			t.Errorf("output text %q, transformers decodes %q", r.complete.GetText(), ref.Decode[i])
		}
	}
}

// TestChatPromptIsTheEngineStacks: kvgate renders Chat with the chat template
// the engine sent; the ids the engine received (echoed in its prompt
// log-probabilities) are what transformers' apply_chat_template makes of the
// same messages and files.
func TestChatPromptIsTheEngineStacks(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	chats := [][][2]string{
		{{"user", "Hello!"}},
		{{"system", "You are terse."}, {"user", "Name a colour."}},
		{{"user", "2+2?"}, {"assistant", "4"}, {"user", "And 3+3?"}},
	}
	var refReq referenceRequest
	var got [][]uint32
	for _, chat := range chats {
		req := &kvgatev1.ChatRequest{SamplingParams: greedy(1)}
		req.SamplingParams.PromptLogprobs = true
		var msgs []json.RawMessage
		for _, m := range chat {
			req.Messages = append(req.Messages, &kvgatev1.ChatMessage{Role: m[0], Content: m[1]})
			msgs = append(msgs, message(m[0], m[1]))
		}
		refReq.Chats = append(refReq.Chats, msgs)
		r, err := s.chat(ctx, req)
		if err != nil {
			t.Fatalf("Chat %v: %v", chat, err)
		}
		var ids []uint32
		for _, lp := range r.complete.GetPromptLogprobs() {
			ids = append(ids, lp.GetTokenId())
		}
		if len(ids) != int(r.complete.GetUsage().GetPromptTokens()) {
			t.Fatalf("Chat %v: %d prompt log-probabilities for %d prompt tokens", chat, len(ids), r.complete.GetUsage().GetPromptTokens())
		}
		got = append(got, ids)
	}
	ref := s.reference(t, refReq)
	for i := range chats {
		if !slices.Equal(got[i], ref.Chats[i]) {
			t.Errorf("chat %v:\n kvgate sent %v\n transformers %v", chats[i], got[i], ref.Chats[i])
		}
	}
}

// TestStopStrings: a stop string cuts the text where it starts, as the same
// generation without it shows.
func TestStopStrings(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := &kvgatev1.GenerateRequest{Text: "Once upon a time", Stream: true, SamplingParams: greedy(24)}
	full, err := s.generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	text := full.complete.GetText()
	// The stop string is a later chunk's text, which the whole text contains.
	stop := ""
	for _, c := range full.chunks[4:] {
		if t := strings.TrimSpace(c.GetText()); len(t) >= 2 && strings.Contains(text, t) {
			stop = t
			break
		}
	}
	if stop == "" {
		t.Fatalf("no usable chunk text in %q", text)
	}
	req.SamplingParams.Stop = []string{stop}
	cut, err := s.generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := text[:strings.Index(text, stop)]
	c := cut.complete
	if c.GetText() != want || c.GetMatchedStopString() != stop || c.GetFinishReason() != kvgatev1.FinishReason_FINISH_REASON_STOP {
		t.Fatalf("stop %q: %q (%v, matched %q); want %q (whole text %q)", stop, c.GetText(), c.GetFinishReason(), c.GetMatchedStopString(), want, text)
	}
}

// TestLogprobs: kvgate relays the engine's log-probabilities of the tokens it
// chose and of the most likely alternatives.
func TestLogprobs(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sp := greedy(6)
	sp.Logprobs, sp.TopLogprobs = true, 3
	r, err := s.generate(ctx, &kvgatev1.GenerateRequest{InputIds: randomIDs(3, 30), SamplingParams: sp})
	if err != nil {
		t.Fatal(err)
	}
	c := r.complete
	if len(c.GetLogprobs()) != len(c.GetOutputIds()) {
		t.Fatalf("%d log-probabilities for %d tokens", len(c.GetLogprobs()), len(c.GetOutputIds()))
	}
	for i, lp := range c.GetLogprobs() {
		top := lp.GetTopLogprobs()
		if lp.GetTokenId() != c.GetOutputIds()[i] || lp.Logprob == nil || lp.GetLogprob() > 0 || len(top) != 3 {
			t.Fatalf("token %d: %v", i, lp)
		}
		// Greedy: the token chosen is the most likely one.
		if top[0].GetTokenId() != lp.GetTokenId() || top[0].GetLogprob() != lp.GetLogprob() {
			t.Errorf("token %d: chose %d (%v), most likely %d (%v)", i, lp.GetTokenId(), lp.GetLogprob(), top[0].GetTokenId(), top[0].GetLogprob())
		}
		if !slices.IsSortedFunc(top, func(a, b *kvgatev1.TopLogprob) int { return -cmpFloat(a.GetLogprob(), b.GetLogprob()) }) {
			t.Errorf("token %d: alternatives not most likely first: %v", i, top)
		}
	}
}

func cmpFloat(a, b float32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestStructuredOutput: a constraint kvgate passes on is applied by vLLM's
// grammar backend on CPU, so even random weights answer in the shape asked.
func TestStructuredOutput(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cases := []struct {
		name  string
		set   func(*kvgatev1.SamplingParams)
		check func(string) error
	}{
		{"regex", func(p *kvgatev1.SamplingParams) {
			p.Constraint = &kvgatev1.SamplingParams_Regex{Regex: "(yes|no), [0-9]{3}"}
		}, func(text string) error {
			if !regexp.MustCompile(`^(yes|no), [0-9]{3}$`).MatchString(text) {
				return errors.New("does not match")
			}
			return nil
		}},
		{"json schema", func(p *kvgatev1.SamplingParams) {
			p.Constraint = &kvgatev1.SamplingParams_JsonSchema{JsonSchema: `{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false}`}
		}, func(text string) error {
			var v struct {
				OK *bool `json:"ok"`
			}
			if err := json.Unmarshal([]byte(text), &v); err != nil {
				return err
			}
			if v.OK == nil {
				return errors.New("no ok")
			}
			return nil
		}},
	}
	for _, tc := range cases {
		sp := &kvgatev1.SamplingParams{Temperature: proto.Float32(0), MaxNewTokens: proto.Uint32(40)}
		tc.set(sp)
		r, err := s.generate(ctx, &kvgatev1.GenerateRequest{Text: "Answer:", SamplingParams: sp})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := tc.check(r.complete.GetText()); err != nil {
			t.Errorf("%s: %q (%v): %v", tc.name, r.complete.GetText(), r.complete.GetFinishReason(), err)
		}
	}
}

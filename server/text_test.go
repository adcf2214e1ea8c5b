package server_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/internal/testutil"
)

func textOf(r result) string {
	var b strings.Builder
	for _, c := range r.chunks {
		b.WriteString(c.Text)
	}
	return b.String()
}

func TestGenerateFromTextStreamsText(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			f := startFleet(t, fleetOptions{protocol: proto, text: true})
			const text = "The router sends each request to the worker that already holds its prefix."
			r := f.mustGenerate(t, &kvgatev1.GenerateRequest{Text: text, Stream: true,
				SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(30), IgnoreEos: true, Seed: i32(1)}})
			want, err := f.text.Encode(text, true)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.complete.Usage.PromptTokens; got != uint32(len(want)) {
				t.Errorf("prompt_tokens = %d, want %d (the tokenizer's ids)", got, len(want))
			}
			decoded, err := f.text.Tokenizer().Decode(r.complete.OutputIds, true)
			if err != nil {
				t.Fatal(err)
			}
			if textOf(r) != decoded || r.complete.Text != decoded {
				t.Fatalf("chunk text %q, completion text %q, want decode of the output %q", textOf(r), r.complete.Text, decoded)
			}
			for _, c := range r.chunks {
				if !utf8.ValidString(c.Text) {
					t.Fatalf("a chunk's text is not valid UTF-8: %q", c.Text)
				}
			}
		})
	}
}

// TestChatSendsTheTemplatesTokens shows that Chat sends the worker exactly
// the ids of the rendered ChatML prompt: the simulated engine's output is a
// function of the prompt ids and the seed, so equal outputs mean equal
// prompts.
func TestChatSendsTheTemplatesTokens(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, text: true})
	sp := &kvgatev1.SamplingParams{MaxNewTokens: u32(24), IgnoreEos: true, Seed: i32(9)}
	c := f.mustChatComplete(t, &kvgatev1.ChatRequest{Messages: []*kvgatev1.ChatMessage{
		{Role: "system", Content: "You are terse."},
		{Role: "user", Content: "What is a KV cache?"},
	}, SamplingParams: sp})

	rendered := "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is a KV cache?<|im_end|>\n<|im_start|>assistant\n"
	ids, err := f.text.Encode(rendered, false)
	if err != nil {
		t.Fatal(err)
	}
	g := f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: ids, SamplingParams: sp}).complete
	if c.Usage.PromptTokens != uint32(len(ids)) || !slices.Equal(c.OutputIds, g.OutputIds) {
		t.Fatalf("chat: %d prompt tokens, output %v; the rendered prompt's %d ids give %v",
			c.Usage.PromptTokens, c.OutputIds, len(ids), g.OutputIds)
	}
	if c.Usage.CachedTokens != 0 || g.Usage.CachedTokens == 0 {
		t.Errorf("cached tokens: chat %d, then the same prompt as ids %d; want 0 then > 0", c.Usage.CachedTokens, g.Usage.CachedTokens)
	}
}

func (f *fleet) mustChatComplete(t *testing.T, req *kvgatev1.ChatRequest) *kvgatev1.GenerateComplete {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := f.chat(ctx, t, req)
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if r.complete == nil {
		t.Fatal("Chat ended without a completion")
	}
	return r.complete
}

func TestStopStringEndsTheGeneration(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, text: true})
	base := &kvgatev1.GenerateRequest{Text: "Tell me about routers.", Stream: true,
		SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(60), IgnoreEos: true, Seed: i32(4)}}
	full := f.mustGenerate(t, base).complete.Text
	// A stop string from the middle of the text, at its first occurrence.
	runes := []rune(full)
	if len(runes) < 40 {
		t.Fatalf("output text too short for the test: %q", full)
	}
	stop := ""
	for i := 20; i < len(runes)-3 && stop == ""; i++ {
		cand := string(runes[i : i+3])
		if at := strings.Index(full, cand); at == len(string(runes[:i])) && !strings.ContainsRune(cand, utf8.RuneError) {
			stop = cand
		}
	}
	if stop == "" {
		t.Fatalf("no usable stop string in %q", full)
	}
	at := strings.Index(full, stop)
	for _, keep := range []bool{false, true} {
		req := &kvgatev1.GenerateRequest{Text: base.Text, Stream: true, SamplingParams: &kvgatev1.SamplingParams{
			MaxNewTokens: u32(60), IgnoreEos: true, Seed: i32(4), Stop: []string{"never-in-output", stop}, NoStopTrim: keep}}
		aborts := f.sims[0].Engine().Stats().AbortCalls
		r := f.mustGenerate(t, req)
		want := full[:at]
		if keep {
			want = full[:at+len(stop)]
		}
		c := r.complete
		if c.Text != want || textOf(r) != want {
			t.Fatalf("no_stop_trim=%v: text %q (chunks %q), want %q", keep, c.Text, textOf(r), want)
		}
		if c.FinishReason != kvgatev1.FinishReason_FINISH_REASON_STOP || c.GetMatchedStopString() != stop {
			t.Fatalf("finish %v, matched %q; want STOP matching %q", c.FinishReason, c.GetMatchedStopString(), stop)
		}
		eng := f.sims[0].Engine()
		testutil.Eventually(t, "the router to abort the generation it stopped", func() bool {
			return eng.Stats().AbortCalls > aborts && eng.Stats().Running == 0
		})
	}
}

func TestTextRequestsNeedATokenizer(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{Text: "hello"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "--model-path") {
		t.Errorf("text without a tokenizer: %v, want FAILED_PRECONDITION saying to give --model-path", err)
	}
	_, err = f.chat(ctx, t, &kvgatev1.ChatRequest{Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "hi"}}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("chat without a tokenizer: %v, want FAILED_PRECONDITION", err)
	}
	_, err = f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 3), SamplingParams: &kvgatev1.SamplingParams{Stop: []string{"x"}}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "sampling_params.stop") {
		t.Errorf("stop strings without a tokenizer: %v, want FAILED_PRECONDITION naming sampling_params.stop", err)
	}
}

func TestBadTextAndChatInput(t *testing.T) {
	tmpl := filepath.Join(t.TempDir(), "strict.jinja")
	if err := os.WriteFile(tmpl, []byte(`{%- for m in messages %}{% if m.role not in ['user', 'assistant'] %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{{ m.content }}{% endfor %}`), 0o644); err != nil {
		t.Fatal(err)
	}
	f := startFleet(t, fleetOptions{workers: 1, text: true, chatTemplate: tmpl})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	user := []*kvgatev1.ChatMessage{{Role: "user", Content: "hi"}}
	tests := []struct {
		name string
		call func() error
		want []string
	}{
		{"both ids and text", func() error {
			_, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{InputIds: prompt(1, 2), Text: "x"})
			return err
		}, []string{"input_ids and text"}},
		{"no prompt at all", func() error {
			_, err := f.generate(ctx, t, &kvgatev1.GenerateRequest{})
			return err
		}, []string{"input_ids", "text"}},
		{"no messages", func() error {
			_, err := f.chat(ctx, t, &kvgatev1.ChatRequest{})
			return err
		}, []string{"messages"}},
		{"the template raises", func() error {
			_, err := f.chat(ctx, t, &kvgatev1.ChatRequest{Messages: []*kvgatev1.ChatMessage{{Role: "system", Content: "x"}}})
			return err
		}, []string{"Only user and assistant roles are supported!"}},
		{"tool call arguments not JSON", func() error {
			_, err := f.chat(ctx, t, &kvgatev1.ChatRequest{Messages: []*kvgatev1.ChatMessage{{Role: "assistant",
				ToolCalls: []*kvgatev1.ToolCall{{Function: &kvgatev1.FunctionCall{Name: "f", Arguments: structpb.NewStringValue("{oops")}}}}}})
			return err
		}, []string{"messages[0].tool_calls[0].function.arguments"}},
		{"template kwargs holding NaN", func() error {
			kw := &structpb.Struct{Fields: map[string]*structpb.Value{"x": structpb.NewNumberValue(math.NaN())}}
			_, err := f.chat(ctx, t, &kvgatev1.ChatRequest{Messages: user, ChatTemplateKwargs: kw})
			return err
		}, []string{"chat_template_kwargs", "finite"}},
		{"tool parameters holding a Value with no kind", func() error {
			params := &structpb.Struct{Fields: map[string]*structpb.Value{"type": {}}}
			_, err := f.chat(ctx, t, &kvgatev1.ChatRequest{Messages: user, Tools: []*kvgatev1.Tool{
				{}, {Function: &kvgatev1.FunctionDefinition{Name: "f", Parameters: params}}}})
			return err
		}, []string{"tools[1].function.parameters", "no kind"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("err = %v, want INVALID_ARGUMENT", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v does not mention %q", err, w)
				}
			}
		})
	}
}

// rawCodec sends bytes as they are, so a test can send what no generated
// client would: a string field that is not UTF-8.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *(v.(*[]byte)) = data; return nil }
func (rawCodec) Name() string                       { return "proto" }

var _ encoding.Codec = rawCodec{}

// rawCall sends msg's bytes to method as they are (unary and server
// streaming alike) and returns the first message of the reply, raw.
func rawCall(t *testing.T, f *fleet, method string, msg []byte) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := f.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(&msg); err != nil {
		t.Fatal(err)
	}
	st.CloseSend()
	var resp []byte
	err = st.RecvMsg(&resp)
	return resp, err
}

func TestUndecodableRequestsAreInvalidArgument(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, text: true})
	bad := []byte{'h', 0xff, 'i'}
	text := protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), bad) // GenerateRequest.text
	message := func(content []byte) []byte {
		m := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("user"))
		return protowire.AppendBytes(protowire.AppendTag(m, 2, protowire.BytesType), content)
	}
	var chat []byte // ChatRequest.messages: a good one, then a bad one
	chat = protowire.AppendBytes(protowire.AppendTag(chat, 2, protowire.BytesType), message([]byte("ok")))
	chat = protowire.AppendBytes(protowire.AppendTag(chat, 2, protowire.BytesType), message(bad))
	// ExplainRequest.metadata (field 3) is a map<string, string>: an entry
	// whose value is not UTF-8.
	entry := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("x-routing-key"))
	entry = protowire.AppendBytes(protowire.AppendTag(entry, 2, protowire.BytesType), bad)
	explain := protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), entry)
	// A length prefix that runs past the end: not a protobuf message at all.
	malformed := []byte{0x1a, 0x7f, 'x'}
	tests := []struct {
		method string
		msg    []byte
		want   string
	}{
		{"/kvgate.v1.Router/Generate", text, "text is not valid UTF-8"},
		{"/kvgate.v1.Router/Chat", chat, "messages[1].content is not valid UTF-8"},
		{"/kvgate.v1.Admin/Explain", explain, "metadata.value is not valid UTF-8"},
		{"/kvgate.v1.Router/Generate", malformed, "not a valid kvgate.v1.GenerateRequest message"},
		{"/kvgate.v1.Admin/Explain", malformed, "not a valid kvgate.v1.ExplainRequest message"},
		{"/kvgate.v1.Admin/ListWorkers", malformed, "not a valid kvgate.v1.ListWorkersRequest message"},
	}
	for _, tc := range tests {
		t.Run(tc.method+"/"+tc.want, func(t *testing.T) {
			_, err := rawCall(t, f, tc.method, tc.msg)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want INVALID_ARGUMENT saying %q", err, tc.want)
			}
		})
	}
}

// A request with no sampling_params at all is as valid as one with an empty
// message: every parameter takes the engine's default. (It once failed with
// INTERNAL whenever a tokenizer was loaded.)
func TestRequestWithoutSamplingParams(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, text: true})
	for _, req := range []*kvgatev1.GenerateRequest{
		{InputIds: []uint32{1, 2, 3}},
		{InputIds: []uint32{1, 2, 3}, Stream: true},
		{Text: "hello"},
	} {
		if c := f.mustGenerate(t, req).complete; len(c.OutputIds) == 0 {
			t.Fatalf("%v: no output", req)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.chat(ctx, t, &kvgatev1.ChatRequest{Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "hi"}}}); err != nil {
		t.Fatalf("Chat without sampling_params: %v", err)
	}
}

// The codec marks undecodable requests with an unknown field of its own; a
// client sending that field in a valid request is not refused for it.
func TestClientSentMarkerFieldIsIgnored(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1})
	msg := protowire.AppendTag(nil, 2, protowire.BytesType) // GenerateRequest.input_ids, packed
	msg = protowire.AppendBytes(msg, []byte{1, 2, 3})
	msg = protowire.AppendTag(msg, protowire.MaxValidNumber, protowire.BytesType)
	msg = protowire.AppendString(msg, "spoofed reason")
	if _, err := rawCall(t, f, "/kvgate.v1.Router/Generate", msg); err != nil {
		t.Fatalf("a valid request carrying the marker field: %v", err)
	}
}

func TestTokenizerCacheMetrics(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1, text: true})
	req := &kvgatev1.GenerateRequest{Text: "the same prompt twice", SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(1)}}
	f.mustGenerate(t, req)
	f.mustGenerate(t, req)
	mfs, err := f.srv.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "level" && lp.GetValue() == "l0" {
					got[mf.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	if got["kvgate_tokenizer_cache_hits_total"] != 1 || got["kvgate_tokenizer_cache_misses_total"] != 1 ||
		got["kvgate_tokenizer_cache_entries"] != 1 || got["kvgate_tokenizer_cache_bytes"] <= 0 {
		t.Fatalf("l0 tokenizer cache metrics %v, want 1 hit, 1 miss, 1 entry and some bytes", got)
	}
}

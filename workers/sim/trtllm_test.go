package sim

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/kvgate/kvgate/api/gen/trtllm"
	"github.com/kvgate/kvgate/internal/testutil"
)

// The simulator speaking TensorRT-LLM's protocol, through the generated
// client: the shapes that protocol has and the others lack. The adapter's
// view of the same engine is in workers/trtllm_test.go.

// trtllmRun is one whole Generate stream.
type trtllmRun struct {
	chunks []*trtllm.GenerateStreamChunk
	final  *trtllm.GenerateComplete
	err    error
}

func (r trtllmRun) streamed() []uint32 {
	var out []uint32
	for _, c := range r.chunks {
		out = append(out, c.GetTokenIds()...)
	}
	return out
}

func runTRTLLM(t *testing.T, c trtllm.TrtllmServiceClient, req *trtllm.GenerateRequest) trtllmRun {
	t.Helper()
	st, err := c.Generate(t.Context(), req)
	if err != nil {
		return trtllmRun{err: err}
	}
	var r trtllmRun
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return r
		}
		if err != nil {
			r.err = err
			return r
		}
		if ch := m.GetChunk(); ch != nil {
			r.chunks = append(r.chunks, ch)
		} else {
			if m.GetRequestId() != req.GetRequestId() {
				t.Errorf("completion echoes request %q, want %q", m.GetRequestId(), req.GetRequestId())
			}
			r.final = m.GetComplete()
		}
	}
}

func trtllmClient(t *testing.T) (*Process, trtllm.TrtllmServiceClient) {
	t.Helper()
	srv, _ := startSim(t, testConfig(ProtocolTRTLLM))
	return srv, trtllm.NewTrtllmServiceClient(testutil.Dial(t, srv.Addr()))
}

func TestTRTLLMRefusals(t *testing.T) {
	_, c := trtllmClient(t) // context 2048
	base := func() *trtllm.GenerateRequest {
		return &trtllm.GenerateRequest{RequestId: "r", Tokenized: &trtllm.TokenizedInput{InputTokenIds: prompt(1, 8)}, MaxTokens: 4}
	}
	for _, tc := range []struct {
		name   string
		tweak  func(*trtllm.GenerateRequest)
		detail string
	}{
		{"max_tokens is required", func(r *trtllm.GenerateRequest) { r.MaxTokens = 0 }, "max_tokens"},
		{"prompt and output beyond the context", func(r *trtllm.GenerateRequest) { r.MaxTokens = 2041 }, "context length"},
		{"beams", func(r *trtllm.GenerateRequest) { r.SamplingConfig = &trtllm.SamplingConfig{BeamWidth: 2} }, "beam_width"},
		{"min_tokens above max_tokens", func(r *trtllm.GenerateRequest) {
			r.SamplingConfig = &trtllm.SamplingConfig{MinTokens: ptrTo[uint32](5)}
		}, "min_tokens"},
		{"stop strings", func(r *trtllm.GenerateRequest) { r.Stop = []string{"</s>"} }, "stop"},
		{"context-only leg", func(r *trtllm.GenerateRequest) {
			r.DisaggregatedParams = &trtllm.DisaggregatedParams{RequestType: trtllm.DisaggregatedParams_REQUEST_TYPE_CONTEXT_ONLY}
		}, "request_type"},
		{"too many alternatives", func(r *trtllm.GenerateRequest) { r.OutputConfig = &trtllm.OutputConfig{Logprobs: ptrTo[int32](21)} }, "logprobs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := base()
			tc.tweak(req)
			wantCode(t, runTRTLLM(t, c, req).err, codes.InvalidArgument, tc.detail)
		})
	}
}

// TestTRTLLMStopToken: a matched stop token ends the request with
// "stop_word" and matched_token_id; the output leaves it out unless
// include_stop_token_in_output asks for it.
func TestTRTLLMStopToken(t *testing.T) {
	_, c := trtllmClient(t)
	req := func(include bool, stop []uint32) *trtllm.GenerateRequest {
		return &trtllm.GenerateRequest{RequestId: "s", Tokenized: &trtllm.TokenizedInput{InputTokenIds: prompt(40, 12)}, MaxTokens: 8,
			SamplingConfig: &trtllm.SamplingConfig{Seed: ptrTo[uint64](4)}, IgnoreEos: true, StopTokenIds: stop,
			IncludeStopTokenInOutput: include}
	}
	free := runTRTLLM(t, c, req(false, nil))
	if free.err != nil || free.final.GetFinishReason() != "length" || len(free.final.GetOutputTokenIds()) != 8 {
		t.Fatalf("free run: %v, %v", free.err, free.final)
	}
	out := free.final.GetOutputTokenIds()
	i := 2
	for slices.Index(out, out[i]) != i {
		i++
	}
	for _, include := range []bool{false, true} {
		r := runTRTLLM(t, c, req(include, []uint32{out[i]}))
		want := out[:i]
		if include {
			want = out[:i+1]
		}
		f := r.final
		if r.err != nil || f.GetFinishReason() != "stop_word" || f.GetMatchedTokenId() != out[i] ||
			!slices.Equal(f.GetOutputTokenIds(), want) || f.GetCompletionTokens() != uint32(i+1) {
			t.Errorf("include %v: %v, completion %v; want stop_word on %d with output %v", include, r.err, f, out[i], want)
		}
	}
}

// TestTRTLLMLogprobsShape: output log-probabilities come one message per
// token, on the chunk that carries the token when streamed, and all of
// them again on the completion; the prompt's come with the completion
// only, without the first token (which has none).
func TestTRTLLMLogprobsShape(t *testing.T) {
	_, c := trtllmClient(t)
	p := prompt(70, 10)
	for _, streaming := range []bool{true, false} {
		r := runTRTLLM(t, c, &trtllm.GenerateRequest{RequestId: "lp", Tokenized: &trtllm.TokenizedInput{InputTokenIds: p}, MaxTokens: 5,
			Streaming: streaming, IgnoreEos: true, OutputConfig: &trtllm.OutputConfig{Logprobs: ptrTo[int32](2), PromptLogprobs: ptrTo[int32](1)}})
		if r.err != nil || r.final == nil {
			t.Fatal(r.err)
		}
		var streamed []*trtllm.TokenLogprob
		for i, ch := range r.chunks {
			if len(ch.GetLogprobs()) != len(ch.GetTokenIds()) {
				t.Errorf("chunk %d: %d logprobs for %d tokens", i, len(ch.GetLogprobs()), len(ch.GetTokenIds()))
			}
			streamed = append(streamed, ch.GetLogprobs()...)
		}
		lps, out := r.final.GetLogprobs(), r.final.GetOutputTokenIds()
		if len(lps) != len(out) || len(out) != 5 || (streaming && len(streamed) != 5) {
			t.Fatalf("streaming %v: completion has %d logprobs for %d tokens, chunks %d; want 5", streaming, len(lps), len(out), len(streamed))
		}
		for i := range streamed {
			if streamed[i].GetTokenId() != lps[i].GetTokenId() || streamed[i].GetLogprob() != lps[i].GetLogprob() {
				t.Errorf("streamed logprob %d %v, the completion's %v", i, streamed[i], lps[i])
			}
		}
		for i, lp := range lps {
			if lp.GetTokenId() != out[i] || len(lp.GetTopLogprobs()) != 2 {
				t.Errorf("streaming %v: output logprob %d: %v", streaming, i, lp)
			}
		}
		in := r.final.GetPromptLogprobs()
		if len(in) != len(p)-1 {
			t.Fatalf("%d prompt logprobs for %d prompt tokens, want one per token after the first", len(in), len(p))
		}
		for i, lp := range in {
			if lp.GetTokenId() != p[i+1] || len(lp.GetTopLogprobs()) != 1 {
				t.Errorf("prompt logprob %d: %v, want token %d with one alternative", i, lp, p[i+1])
			}
		}
	}
}

func TestTRTLLMInfoHealthAndMissingRPCs(t *testing.T) {
	srv, c := trtllmClient(t)
	ctx := context.Background()
	mi, err := c.GetModelInfo(ctx, &trtllm.GetModelInfoRequest{})
	if err != nil || mi.GetModelId() != "kvgate-sim-8b" || mi.GetVocabSize() != 128256 || mi.GetMaxSeqLen() != 2048 || mi.GetMaxInputLen() != 2047 {
		t.Errorf("model info: %v, %v", mi, err)
	}
	if si, err := c.GetServerInfo(ctx, &trtllm.GetServerInfoRequest{}); err != nil || si.GetWorldSize() != 1 {
		t.Errorf("server info: %v, %v", si, err)
	}
	for _, tc := range []struct {
		faults Faults
		want   string
	}{{Faults{}, "OK"}, {Faults{Unhealthy: true}, "sim: injected fault: unhealthy"}} {
		srv.Engine().SetFaults(tc.faults)
		if h, err := c.HealthCheck(ctx, &trtllm.HealthCheckRequest{}); err != nil || h.GetStatus() != tc.want {
			t.Errorf("faults %+v: health %v, %v; want status %q", tc.faults, h, err, tc.want)
		}
	}
	if a, err := c.Abort(ctx, &trtllm.AbortRequest{RequestId: "nobody"}); err != nil || a.GetSuccess() {
		t.Errorf("abort of an unknown request: %v, %v; want success false", a, err)
	}
}

func TestTRTLLMConfigRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tweak func(*Config)
	}{
		{"prefill role", func(c *Config) { c.Role = RolePrefill }},
		{"data-parallel ranks", func(c *Config) { c.DPSize = 2 }},
	} {
		cfg := testConfig(ProtocolTRTLLM)
		tc.tweak(&cfg)
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: New = %v; want ErrInvalidConfig", tc.name, err)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

package workers_test

// The TensorRT-LLM adapter against the simulator speaking trtllm.TrtllmService
// over loopback gRPC: what sets that protocol apart from SGLang's and vLLM's
// (a required max_tokens, one log-probability message per token, a health
// status text, no GetLoads, no data-parallel rank) is the adapter's to hide.
// What every protocol shares runs through allSimProtocols in the other tests.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestParseProtocolNamesTheProtocols: a mistyped protocol is refused with
// the names that would have worked.
func TestParseProtocolNamesTheProtocols(t *testing.T) {
	_, err := workers.ParseProtocol("tensorrt")
	if err == nil || !containsAll(err.Error(), `"tensorrt"`, "sglang", "vllm", "trtllm", "auto") {
		t.Errorf("ParseProtocol(tensorrt): %v; want an error naming the protocols", err)
	}
}

// TestTRTLLMConnectByName: a worker named trtllm connects without detection,
// and naming the wrong protocol is the engine's UNIMPLEMENTED with the
// address, never a worker that fails later.
func TestTRTLLMConnectByName(t *testing.T) {
	trt, _ := simtest.Worker(t, simtest.Config(sim.ProtocolTRTLLM))
	sgl, _ := simtest.Worker(t, simtest.Config(sim.ProtocolSGLang))
	w, err := workers.Connect(testutil.Context(t, 5*time.Second), "grpc://"+trt.Addr(), workers.ConnectOptions{Protocol: workers.ProtocolTRTLLM})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Protocol() != workers.ProtocolTRTLLM || w.Info().VocabSize != 128256 {
		t.Errorf("worker %v, info %+v", w.Protocol(), w.Info())
	}
	_, err = workers.Connect(testutil.Context(t, 5*time.Second), sgl.Addr(), workers.ConnectOptions{Protocol: workers.ProtocolTRTLLM})
	if status.Code(err) != codes.Unimplemented || !containsAll(err.Error(), sgl.Addr(), "trtllm") {
		t.Errorf("trtllm named for an SGLang engine: %v; want UNIMPLEMENTED naming the worker and the protocol", err)
	}
}

// generateAll runs req to its end and returns its chunks.
func generateAll(t *testing.T, w *workers.Worker, req *workers.GenerateRequest) []workers.Chunk {
	t.Helper()
	s, err := w.Backend().Generate(testutil.Context(t, 5*time.Second), req)
	if err != nil {
		t.Fatal(err)
	}
	return drain(t, s)
}

func streamedIDs(chunks []workers.Chunk) []uint32 {
	var out []uint32
	for _, c := range chunks {
		out = append(out, c.TokenIDs...)
	}
	return out
}

// TestTRTLLMSameAnswersAsVLLM: the simulator's output is a function of the
// request, so the same request through the TensorRT-LLM and the vLLM
// adapters must yield the same tokens, counts, finish and
// log-probabilities: whatever the protocols' shapes, the router sees one
// answer.
func TestTRTLLMSameAnswersAsVLLM(t *testing.T) {
	_, trt := simtest.Worker(t, simtest.Config(sim.ProtocolTRTLLM))
	_, vll := simtest.Worker(t, simtest.Config(sim.ProtocolVLLM))
	prompt := testutil.Tokens(300, 40)
	for _, tc := range []struct {
		name     string
		noStream bool
		sampling workers.Sampling
		logprobs *workers.LogprobRequest
	}{
		{"streamed, seeded", false, workers.Sampling{MaxNewTokens: ptr[uint32](12), Seed: ptr[int32](5), IgnoreEOS: true}, nil},
		{"complete only, greedy", true, workers.Sampling{MaxNewTokens: ptr[uint32](9), Temperature: ptr[float32](0), IgnoreEOS: true}, nil},
		{"min tokens", false, workers.Sampling{MaxNewTokens: ptr[uint32](6), MinNewTokens: 6, Seed: ptr[int32](1)}, nil},
		{"output and prompt logprobs, streamed", false, workers.Sampling{MaxNewTokens: ptr[uint32](5), Seed: ptr[int32](2), IgnoreEOS: true},
			&workers.LogprobRequest{Output: true, Prompt: true, TopK: 3}},
		{"prompt logprobs only, complete only", true, workers.Sampling{MaxNewTokens: ptr[uint32](4), Seed: ptr[int32](2), IgnoreEOS: true},
			&workers.LogprobRequest{Prompt: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer := func(w *workers.Worker) (ids []uint32, fin *workers.Completion, out, in []workers.Logprob) {
				chunks := generateAll(t, w, &workers.GenerateRequest{RequestID: w.Protocol().String() + "-" + tc.name,
					InputIDs: prompt, Sampling: tc.sampling, NoStream: tc.noStream, Logprobs: tc.logprobs})
				for _, c := range chunks {
					out = append(out, c.Logprobs...)
					in = append(in, c.PromptLogprobs...)
				}
				fin = chunks[len(chunks)-1].Final
				if len(out) == 0 {
					out = fin.Logprobs
				}
				if len(in) == 0 {
					in = fin.PromptLogprobs
				}
				return streamedIDs(chunks), fin, out, in
			}
			gotIDs, got, gotOut, gotIn := answer(trt)
			wantIDs, want, wantOut, wantIn := answer(vll)
			if !slices.Equal(gotIDs, wantIDs) || !slices.Equal(got.OutputIDs, want.OutputIDs) {
				t.Errorf("tokens: trtllm streamed %v, completed %v; vllm %v, %v", gotIDs, got.OutputIDs, wantIDs, want.OutputIDs)
			}
			if got.FinishReason != want.FinishReason || got.PromptTokens != want.PromptTokens ||
				got.CompletionTokens != want.CompletionTokens || got.CachedTokens != want.CachedTokens {
				t.Errorf("completion: trtllm %+v, vllm %+v", got, want)
			}
			if !slices.EqualFunc(gotOut, wantOut, sameLogprob) || !slices.EqualFunc(gotIn, wantIn, sameLogprob) {
				t.Errorf("logprobs: trtllm out %v in %v; vllm out %v in %v", gotOut, gotIn, wantOut, wantIn)
			}
			if tc.logprobs != nil && tc.logprobs.Prompt && (len(gotIn) != len(prompt) || !gotIn[0].Missing) {
				t.Errorf("prompt logprobs: %d for %d tokens, first %+v; want one per token, the first missing", len(gotIn), len(prompt), gotIn)
			}
		})
	}
}

func sameLogprob(a, b workers.Logprob) bool {
	return a.TokenID == b.TokenID && a.Value == b.Value && a.Missing == b.Missing && slices.Equal(a.Top, b.Top)
}

// TestTRTLLMGenerateContract: what the adapter fills in or maps.
func TestTRTLLMGenerateContract(t *testing.T) {
	srv, w := simtest.Worker(t, simtest.Config(sim.ProtocolTRTLLM)) // context 4096
	t.Run("max_tokens unset: what the context leaves", func(t *testing.T) {
		chunks := generateAll(t, w, &workers.GenerateRequest{RequestID: "ctx", InputIDs: testutil.Tokens(1, 4000),
			Sampling: workers.Sampling{IgnoreEOS: true}})
		if fin := chunks[len(chunks)-1].Final; fin.FinishReason != "length" || fin.CompletionTokens != 96 {
			t.Errorf("completion %+v; want length after 96 tokens", fin)
		}
	})
	t.Run("stop token: matched, kept in the output, finish stop", func(t *testing.T) {
		free := streamedIDs(generateAll(t, w, &workers.GenerateRequest{RequestID: "free", InputIDs: testutil.Tokens(50, 20),
			Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](10), Seed: ptr[int32](9), IgnoreEOS: true}}))
		i := 3
		for slices.Index(free, free[i]) != i {
			i++
		}
		chunks := generateAll(t, w, &workers.GenerateRequest{RequestID: "stop", InputIDs: testutil.Tokens(50, 20),
			Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](10), Seed: ptr[int32](9), IgnoreEOS: true, StopTokenIDs: []uint32{free[i]}}})
		fin := chunks[len(chunks)-1].Final
		if fin.FinishReason != "stop" || fin.MatchedStopTokenID == nil || *fin.MatchedStopTokenID != free[i] ||
			!slices.Equal(fin.OutputIDs, free[:i+1]) || fin.CompletionTokens != uint32(i+1) {
			t.Errorf("completion %+v; want stop on %d after %v", fin, free[i], free[:i+1])
		}
	})
	t.Run("a data-parallel rank is refused before the engine", func(t *testing.T) {
		before := srv.Engine().Stats().Requests
		_, err := w.Backend().Generate(testutil.Context(t, 5*time.Second), &workers.GenerateRequest{RequestID: "dp", InputIDs: testutil.Tokens(1, 4), DPRank: ptr(1)})
		if !testutil.IsFault(err, fault.Precondition) || srv.Engine().Stats().Requests != before {
			t.Errorf("Generate with a rank: %v; want FAILED_PRECONDITION and nothing sent", err)
		}
	})
	t.Run("aborting an unknown request is no error", func(t *testing.T) {
		if err := w.Backend().Abort(testutil.Context(t, 5*time.Second), "never-was"); err != nil {
			t.Errorf("Abort: %v", err)
		}
	})
}

// TestTRTLLMHealthStatusText: HealthCheck's status "OK" is healthy; any
// other text is the engine's account of what is wrong.
func TestTRTLLMHealthStatusText(t *testing.T) {
	srv, w := simtest.Worker(t, simtest.Config(sim.ProtocolTRTLLM))
	if err := w.Backend().Health(testutil.Context(t, 5*time.Second)); err != nil {
		t.Errorf("healthy engine: %v", err)
	}
	srv.Engine().SetFaults(sim.Faults{Unhealthy: true})
	err := w.Backend().Health(testutil.Context(t, 5*time.Second))
	if !errors.Is(err, workers.ErrUnhealthy) || !containsAll(err.Error(), "injected fault") {
		t.Errorf("unhealthy engine: %v; want ErrUnhealthy with the engine's status", err)
	}
	srv.Engine().SetFaults(sim.Faults{})
	if err := w.Backend().Health(context.Background()); err != nil {
		t.Errorf("recovered engine: %v", err)
	}
}

// containsAll reports whether s holds every one of subs.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

package pd_test

// Log-probabilities through a disaggregated request against the simulator:
// the prefill leg computes the prompt's, the decode leg the output's, and
// the stream the caller reads carries both, as a single engine's would.

import (
	"context"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

func TestPDSimLogprobs(t *testing.T) {
	for _, p := range simProtocols {
		t.Run(p.name, func(t *testing.T) {
			_, pw := startPDSim(t, p.name, sim.RolePrefill, sim.Faults{})
			_, dw := startPDSim(t, p.name, sim.RoleDecode, sim.Faults{})
			_, single := simtest.Worker(t, simtest.Config(p.name))
			noPDGoroutines(t)
			ask := &workers.LogprobRequest{Output: true, Prompt: true, TopK: 3}

			// What one engine answers: the reference for the prompt's.
			req := simPDRequest("single-" + p.name)
			req.Logprobs = ask
			st, err := single.Backend().Generate(testutil.Context(t, 5*time.Second), req)
			if err != nil {
				t.Fatal(err)
			}
			ref := simtest.ReadLogprobs(t, st)
			if len(ref.Prompts) != 1 || len(ref.Prompts[0]) != len(req.InputIDs) || !ref.Prompts[0][0].Missing {
				t.Fatalf("single engine's prompt log-probabilities: %+v", ref.Prompts)
			}

			// Several requests: on SGLang the decode leg may complete before
			// the prefill leg's completion has been read, which Recv waits for.
			for i := range 5 {
				req := simPDRequest("pd-" + p.name)
				req.Logprobs = ask
				pst, err := pd.Run(testutil.Context(t, 5*time.Second), pw, dw, req, pd.Legs{Room: int32(200 + i)})
				if err != nil {
					t.Fatal(err)
				}
				got := simtest.ReadLogprobs(t, pst)
				if len(got.Prompts) != 1 || !reflect.DeepEqual(got.Prompts[0], ref.Prompts[0]) {
					t.Errorf("request %d: prompt log-probabilities %d times, %+v; want once, as the single engine's", i, len(got.Prompts), got.Prompts)
				}
				if len(got.ChunkLogprobs) != len(got.Tokens) || len(got.Tokens) != 8 {
					t.Fatalf("request %d: %d output log-probabilities for %d tokens", i, len(got.ChunkLogprobs), len(got.Tokens))
				}
				for j, lp := range got.ChunkLogprobs {
					if lp.TokenID != got.Tokens[j] || lp.Missing || lp.Value > 0 || len(lp.Top) != 3 {
						t.Errorf("request %d: token %d (%d): %+v", i, j, got.Tokens[j], lp)
					}
				}
				testutil.Receive(t, pst.Done(), "both legs to end")
			}
		})
	}
}

// Asking for the output's only, no leg reports the prompt's; asking for
// nothing, nothing comes.
func TestPDSimLogprobsAskedFor(t *testing.T) {
	for _, p := range simProtocols {
		for _, tc := range []struct {
			name         string
			ask          *workers.LogprobRequest
			output, prmt bool
		}{
			{"output only", &workers.LogprobRequest{Output: true}, true, false},
			{"prompt only", &workers.LogprobRequest{Prompt: true, TopK: 1}, false, true},
			{"nothing", nil, false, false},
		} {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				_, pw := startPDSim(t, p.name, sim.RolePrefill, sim.Faults{})
				_, dw := startPDSim(t, p.name, sim.RoleDecode, sim.Faults{})
				req := simPDRequest("ask")
				req.Logprobs = tc.ask
				st, err := pd.Run(testutil.Context(t, 5*time.Second), pw, dw, req, pd.Legs{Room: 300})
				if err != nil {
					t.Fatal(err)
				}
				got := simtest.ReadLogprobs(t, st)
				if (len(got.ChunkLogprobs) > 0) != tc.output || (len(got.Prompts) > 0) != tc.prmt {
					t.Errorf("%d output log-probabilities, prompt's %d times", len(got.ChunkLogprobs), len(got.Prompts))
				}
				testutil.Receive(t, st.Done(), "both legs to end")
			})
		}
	}
}

// sgCompleteWithPrompt is a prefill completion carrying the prompt's
// log-probabilities for the ids 1..5 of pdRequest.
func sgCompleteWithPrompt() *sglang.GenerateResponse {
	m := sgComplete(5, 0)
	in := &sglang.InputLogProbs{TokenIds: []uint32{1, 2, 3, 4, 5}}
	for i := range 5 {
		v := &sglang.InputTokenLogProb{}
		if i > 0 {
			v.Value = proto.Float32(-float32(i))
		}
		in.TokenLogprobs = append(in.TokenLogprobs, v)
	}
	m.GetComplete().InputLogprobs = in
	return m
}

// The SGLang decode leg completes while the prefill leg is still running:
// the completion waits for the prefill leg, and carries its prompt
// log-probabilities; a prefill leg that fails leaves them out. Each leg is
// asked for its part only.
func TestPDSGLangPromptLogprobsWait(t *testing.T) {
	for _, tc := range []struct {
		name       string
		prefillErr error
	}{
		{"prefill completes", nil},
		{"prefill fails", status.Error(codes.Internal, "prefill engine broke")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			prefill := newPDSGLang(func(ctx context.Context, _ *sglang.GenerateRequest, send func(*sglang.GenerateResponse) error) error {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
				if tc.prefillErr != nil {
					return tc.prefillErr
				}
				return send(sgCompleteWithPrompt())
			})
			decode := newPDSGLang(func(_ context.Context, _ *sglang.GenerateRequest, send func(*sglang.GenerateResponse) error) error {
				_ = send(sgChunk(7))
				return send(sgComplete(5, 0, 7))
			})
			pw, dw := prefill.worker(t, workers.RolePrefill), decode.worker(t, workers.RoleDecode)
			testutil.NoLeaks(t)
			req := pdRequest()
			req.Logprobs = &workers.LogprobRequest{Output: true, Prompt: true, TopK: 2}
			st, err := pd.Run(testutil.Context(t, 5*time.Second), pw, dw, req, pd.Legs{Room: 5})
			if err != nil {
				t.Fatal(err)
			}
			pr, dr := <-prefill.reqs, <-decode.reqs
			if !pr.GetReturnLogprob() || pr.GetLogprobStartLen() != 0 || pr.GetTopLogprobsNum() != 2 {
				t.Errorf("prefill leg asked return_logprob %v, logprob_start_len %d, top %d; want the prompt's with 2",
					pr.GetReturnLogprob(), pr.GetLogprobStartLen(), pr.GetTopLogprobsNum())
			}
			if !dr.GetReturnLogprob() || dr.GetLogprobStartLen() != -1 || dr.GetTopLogprobsNum() != 2 {
				t.Errorf("decode leg asked return_logprob %v, logprob_start_len %d, top %d; want the output's with 2",
					dr.GetReturnLogprob(), dr.GetLogprobStartLen(), dr.GetTopLogprobsNum())
			}
			if c, err := st.Recv(); err != nil || c.Final != nil || c.PromptLogprobs != nil {
				t.Fatalf("first item %+v, %v; want the chunk without prompt log-probabilities", c, err)
			}
			fin := make(chan workers.Chunk, 1)
			go func() {
				c, _ := st.Recv()
				fin <- c
			}()
			select {
			case c := <-fin:
				t.Fatalf("the completion came before the prefill leg ended: %+v", c)
			case <-time.After(50 * time.Millisecond):
			}
			close(release)
			c := <-fin
			if c.Final == nil {
				t.Fatalf("got %+v, want the completion", c)
			}
			lps := c.Final.PromptLogprobs
			if tc.prefillErr != nil {
				if lps != nil {
					t.Errorf("prompt log-probabilities after a failed prefill: %+v", lps)
				}
			} else if len(lps) != 5 || !lps[0].Missing || lps[4].Value != -4 {
				t.Errorf("prompt log-probabilities %+v", lps)
			}
			testutil.Receive(t, st.Done(), "both legs to end")
		})
	}
}

// vLLM's prefill leg asks for prompt_logprobs only and the decode leg for
// logprobs only; the prompt's, known before the decode leg starts, ride on
// its first chunk.
func TestPDVLLMLegLogprobs(t *testing.T) {
	prefill := newPDVLLM(func(_ context.Context, _ *vllm.GenerateRequest, send func(*vllm.GenerateResponse) error) error {
		m := vlComplete(5, 0, ptr(kvHandoff), 42)
		m.GetComplete().InputLogprobs = &vllm.InputLogProbs{TokenIds: []uint32{1, 2},
			TokenLogprobs: []*vllm.InputTokenLogProb{{}, {Value: proto.Float32(-1)}}}
		return send(m)
	})
	decode := newPDVLLM(func(_ context.Context, _ *vllm.GenerateRequest, send func(*vllm.GenerateResponse) error) error {
		_ = send(vlChunk(7))
		return send(vlComplete(5, 0, nil, 7))
	})
	pw, dw := prefill.worker(t, workers.RolePrefill), decode.worker(t, workers.RoleDecode)
	testutil.NoLeaks(t)
	req := pdRequest()
	req.Logprobs = &workers.LogprobRequest{Output: true, Prompt: true, TopK: 4}
	st, err := pd.Run(testutil.Context(t, 5*time.Second), pw, dw, req, pd.Legs{Room: 3})
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.Recv()
	if err != nil || len(c.PromptLogprobs) != 2 || !c.PromptLogprobs[0].Missing || c.PromptLogprobs[1].Value != -1 {
		t.Fatalf("first chunk %+v, %v; want the prefill leg's prompt log-probabilities", c, err)
	}
	pr, dr := <-prefill.reqs, <-decode.reqs
	if psp := pr.GetSamplingParams(); psp.PromptLogprobs == nil || psp.GetPromptLogprobs() != 4 || psp.Logprobs != nil {
		t.Errorf("prefill leg asked logprobs %v, prompt_logprobs %v; want the prompt's with 4", psp.Logprobs, psp.PromptLogprobs)
	}
	if dsp := dr.GetSamplingParams(); dsp.Logprobs == nil || dsp.GetLogprobs() != 4 || dsp.PromptLogprobs != nil {
		t.Errorf("decode leg asked logprobs %v, prompt_logprobs %v; want the output's with 4", dsp.Logprobs, dsp.PromptLogprobs)
	}
	if _, fin, err := readAll(st); err != nil || fin == nil || fin.PromptLogprobs != nil {
		t.Errorf("completion %+v, %v; the prompt's were already sent", fin, err)
	}
	testutil.Receive(t, st.Done(), "both legs to end")
}

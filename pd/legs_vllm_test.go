package pd_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/workers"
)

// kvHandoff is what the simulated prefill engine returns; odd spacing and key
// order show it travels verbatim.
const kvHandoff = `{"do_remote_prefill": true, "remote_host":"10.0.0.7","remote_port":5600, "remote_request_id":"pd-1","remote_engine_id":"e-1"}`

func TestPDVLLMSequentialLegs(t *testing.T) {
	prefill := newPDVLLM(func(_ context.Context, _ *vllm.GenerateRequest, send func(*vllm.GenerateResponse) error) error {
		return send(vlComplete(5, 2, ptr(kvHandoff), 42))
	})
	decode := newPDVLLM(nil)
	release := make(chan struct{})
	decode.script = func(ctx context.Context, _ *vllm.GenerateRequest, send func(*vllm.GenerateResponse) error) error {
		if !decode.hold(ctx, release) {
			return ctx.Err()
		}
		_ = send(vlChunk(7))
		_ = send(vlChunk(8))
		return send(vlComplete(5, 0, nil, 7, 8))
	}
	pw, dw := prefill.worker(t, workers.RolePrefill), decode.worker(t, workers.RoleDecode)
	testutil.NoLeaks(t)

	st, err := pd.Run(testutil.Context(t, 5*time.Second), pw, dw, pdRequest(), pd.Legs{Room: 3})
	if err != nil {
		t.Fatal(err)
	}
	dreq := <-decode.reqs
	select {
	case <-st.PrefillDone():
	default:
		t.Fatal("the decode leg started before the prefill result was final")
	}
	if p := st.Prefill(); p.Err != nil || p.PromptTokens != 5 || p.CachedTokens != 2 {
		t.Errorf("prefill result %+v", p)
	}
	close(release)
	tokens, fin, err := readAll(st)
	if err != nil || !slices.Equal(tokens, []uint32{7, 8}) || fin == nil {
		t.Fatalf("decode stream: %v, %+v, %v", tokens, fin, err)
	}
	testutil.Receive(t, st.Done(), "both legs to end")

	preq := <-prefill.reqs
	sp := preq.GetSamplingParams()
	if sp.GetMaxTokens() != 1 || sp.MaxTokens == nil || sp.GetMinTokens() != 0 || sp.GetN() != 1 || preq.GetStream() {
		t.Errorf("prefill leg: max_tokens %v, min_tokens %d, n %d, stream %v; want 1, 0, 1, false",
			sp.MaxTokens, sp.GetMinTokens(), sp.GetN(), preq.GetStream())
	}
	if got := preq.GetKvTransferParamsJson(); got != `{"do_remote_decode":true}` {
		t.Errorf("prefill kv_transfer_params_json = %q", got)
	}
	if got := dreq.GetKvTransferParamsJson(); got != kvHandoff {
		t.Errorf("decode kv_transfer_params_json = %q, want the prefill's verbatim", got)
	}
	dsp := dreq.GetSamplingParams()
	if !dreq.GetStream() || dsp.GetMaxTokens() != 16 || dsp.GetMinTokens() != 2 || dreq.GetRequestId() != "pd-1" {
		t.Errorf("decode leg: %v", dreq)
	}
	if !slices.Equal(preq.GetTokenized().GetInputIds(), dreq.GetTokenized().GetInputIds()) {
		t.Error("the legs carry different prompts")
	}
	if pw.InFlight() != 0 || dw.InFlight() != 0 {
		t.Errorf("in flight: prefill %d, decode %d", pw.InFlight(), dw.InFlight())
	}
}

func TestPDVLLMPrefillFaults(t *testing.T) {
	tests := []struct {
		name     string
		prefill  vllmScript
		want     fault.Kind
		contains string
	}{
		{"not a KV producer", func(_ context.Context, _ *vllm.GenerateRequest, send func(*vllm.GenerateResponse) error) error {
			return send(vlComplete(5, 0, nil, 42))
		}, fault.Precondition, "KV producer"},
		{"handoff not a JSON object", func(_ context.Context, _ *vllm.GenerateRequest, send func(*vllm.GenerateResponse) error) error {
			return send(vlComplete(5, 0, ptr(`[1,2]`), 42))
		}, fault.Precondition, "not a JSON object"},
		{"prefill engine fails", func(context.Context, *vllm.GenerateRequest, func(*vllm.GenerateResponse) error) error {
			return status.Error(codes.Internal, "engine crashed")
		}, fault.Unavailable, "engine crashed"},
		{"prefill engine ends without completion", func(context.Context, *vllm.GenerateRequest, func(*vllm.GenerateResponse) error) error {
			return nil
		}, fault.Unavailable, "before its completion"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefill, decode := newPDVLLM(tt.prefill), newPDVLLM(nil)
			pw, dw := prefill.worker(t, workers.RolePrefill), decode.worker(t, workers.RoleDecode)
			testutil.NoLeaks(t)
			st, err := pd.Run(testutil.Context(t, 5*time.Second), pw, dw, pdRequest(), pd.Legs{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = st.Recv()
			legFailure(t, err, "prefill", tt.want)
			if !strings.Contains(err.Error(), tt.contains) || !strings.Contains(err.Error(), pw.URL()) {
				t.Errorf("error %q should name the prefill worker and say %q", err, tt.contains)
			}
			testutil.Receive(t, st.Done(), "both legs to end")
			if len(decode.reqs) != 0 {
				t.Error("the decode leg was sent after a failed prefill")
			}
		})
	}
}

func TestPDVLLMDecodeFailsBeforeFirstToken(t *testing.T) {
	prefill := newPDVLLM(func(_ context.Context, _ *vllm.GenerateRequest, send func(*vllm.GenerateResponse) error) error {
		return send(vlComplete(5, 0, ptr(kvHandoff), 42))
	})
	decode := newPDVLLM(func(context.Context, *vllm.GenerateRequest, func(*vllm.GenerateResponse) error) error {
		return status.Error(codes.Unavailable, "remote prefill fetch failed")
	})
	pw, dw := prefill.worker(t, workers.RolePrefill), decode.worker(t, workers.RoleDecode)
	testutil.NoLeaks(t)
	st, err := pd.Run(testutil.Context(t, 5*time.Second), pw, dw, pdRequest(), pd.Legs{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	legFailure(t, err, "decode", fault.Unavailable)
	testutil.Receive(t, st.Done(), "both legs to end")
	if st.Prefill().Err != nil {
		t.Errorf("prefill result %+v: the prefill leg did complete", st.Prefill())
	}
}

func TestPDVLLMClientCancels(t *testing.T) {
	t.Run("during prefill", func(t *testing.T) {
		prefill, decode := newPDVLLM(nil), newPDVLLM(nil)
		prefill.script = func(ctx context.Context, _ *vllm.GenerateRequest, _ func(*vllm.GenerateResponse) error) error {
			prefill.hold(ctx, never)
			return ctx.Err()
		}
		pw, dw := prefill.worker(t, workers.RolePrefill), decode.worker(t, workers.RoleDecode)
		testutil.NoLeaks(t)
		ctx, cancel := context.WithCancel(testutil.Context(t, 5*time.Second))
		st, err := pd.Run(ctx, pw, dw, pdRequest(), pd.Legs{})
		if err != nil {
			t.Fatal(err)
		}
		<-prefill.reqs
		cancel()
		if _, err := st.Recv(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Recv = %v, want CANCELED", err)
		}
		testutil.Receive(t, st.Done(), "both legs to end")
		testutil.Eventually(t, "the prefill leg to be aborted", func() bool {
			return prefill.abortCount() == 1 && prefill.cancelCount() == 1
		})
		if len(decode.reqs) != 0 {
			t.Error("the decode leg was sent after the client left")
		}
	})

	t.Run("before the decode leg's first token", func(t *testing.T) {
		prefill := newPDVLLM(func(_ context.Context, _ *vllm.GenerateRequest, send func(*vllm.GenerateResponse) error) error {
			return send(vlComplete(5, 0, ptr(kvHandoff), 42))
		})
		decode := newPDVLLM(nil)
		release := make(chan struct{})
		decode.script = func(ctx context.Context, _ *vllm.GenerateRequest, send func(*vllm.GenerateResponse) error) error {
			if !decode.hold(ctx, release) {
				return ctx.Err()
			}
			_ = send(vlChunk(7))
			decode.hold(ctx, never)
			return ctx.Err()
		}
		pw, dw := prefill.worker(t, workers.RolePrefill), decode.worker(t, workers.RoleDecode)
		testutil.NoLeaks(t)
		ctx, cancel := context.WithCancel(testutil.Context(t, 5*time.Second))
		st, err := pd.Run(ctx, pw, dw, pdRequest(), pd.Legs{})
		if err != nil {
			t.Fatal(err)
		}
		<-decode.reqs
		cancel()
		if _, err := st.Recv(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Recv = %v, want CANCELED", err)
		}
		testutil.Never(t, "decode leg aborted before its first item", 100*time.Millisecond, func() bool {
			return decode.abortCount() > 0 || decode.cancelCount() > 0
		})
		close(release)
		testutil.Receive(t, st.Done(), "both legs to end")
		testutil.Eventually(t, "the decode leg to be aborted after its first item", func() bool {
			return decode.abortCount() == 1 && decode.cancelCount() == 1
		})
	})
}

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
	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/internal/testutil/simtest"
	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

func pdRequest() *workers.GenerateRequest {
	return &workers.GenerateRequest{
		RequestID: "pd-1",
		InputIDs:  []uint32{1, 2, 3, 4, 5},
		Sampling:  workers.Sampling{MaxNewTokens: ptr(uint32(16)), MinNewTokens: 2},
	}
}

// meet closes mine and waits for other: each leg's script calls it, so a
// router that sent the legs one after the other would fail the request.
func meet(mine, other chan struct{}) error {
	close(mine)
	select {
	case <-other:
		return nil
	case <-time.After(3 * time.Second):
		return status.Error(codes.DeadlineExceeded, "the other leg never arrived: legs not sent concurrently")
	}
}

// never is a release channel nobody closes.
var never = make(chan struct{})

func TestPDSGLangLegsConcurrentAndIdentical(t *testing.T) {
	pIn, dIn := make(chan struct{}), make(chan struct{})
	prefill := newPDSGLang(func(_ context.Context, _ *sglang.GenerateRequest, send func(*sglang.GenerateResponse) error) error {
		if err := meet(pIn, dIn); err != nil {
			return err
		}
		return send(sgComplete(5, 3, 7))
	})
	prefill.bootstrapPort = 9123
	decode := newPDSGLang(func(_ context.Context, _ *sglang.GenerateRequest, send func(*sglang.GenerateResponse) error) error {
		if err := meet(dIn, pIn); err != nil {
			return err
		}
		_ = send(sgChunk(7, 8))
		_ = send(sgChunk(9))
		return send(sgComplete(5, 0, 7, 8, 9))
	})
	pw, dw := prefill.worker(t, workers.RolePrefill), decode.worker(t, workers.RoleDecode)
	testutil.NoLeaks(t)

	req := pdRequest()
	st, err := pd.Run(testutil.Context(t, 5*time.Second), pw, dw, req, pd.Legs{Room: 42})
	if err != nil {
		t.Fatal(err)
	}
	tokens, fin, err := readAll(st)
	if err != nil || !slices.Equal(tokens, []uint32{7, 8, 9}) || fin == nil || fin.CompletionTokens != 3 {
		t.Fatalf("decode stream: tokens %v, completion %+v, err %v", tokens, fin, err)
	}
	if !st.DecodeStarted() {
		t.Error("DecodeStarted is false after the stream")
	}
	testutil.Receive(t, st.Done(), "both legs to end")
	if p := st.Prefill(); p.Err != nil || p.PromptTokens != 5 || p.CachedTokens != 3 || p.Duration <= 0 {
		t.Errorf("prefill result %+v", p)
	}
	if d := st.Decode(); d.Err != nil || !slices.Equal(d.OutputIDs, []uint32{7, 8, 9}) {
		t.Errorf("decode result %+v", d)
	}

	preq, dreq := <-prefill.reqs, <-decode.reqs
	if !proto.Equal(preq, dreq) {
		t.Errorf("legs differ:\nprefill %v\ndecode  %v", preq, dreq)
	}
	want := &sglang.DisaggregatedParams{BootstrapHost: "127.0.0.1", BootstrapPort: 9123, BootstrapRoom: 42}
	if !proto.Equal(preq.GetDisaggregatedParams(), want) {
		t.Errorf("disaggregated_params = %v, want %v", preq.GetDisaggregatedParams(), want)
	}
	if preq.GetRequestId() != "pd-1" || !preq.GetStream() || preq.GetSamplingParams().GetMaxNewTokens() != 16 {
		t.Errorf("leg request %v", preq)
	}
	if req.Disaggregated != nil {
		t.Error("the caller's request was modified")
	}
	for name, e := range map[string]*pdSGLang{"prefill": prefill, "decode": decode} {
		if e.abortCount() != 0 || e.cancelCount() != 0 {
			t.Errorf("%s: %d aborts, %d cancelled calls on a clean run", name, e.abortCount(), e.cancelCount())
		}
	}
	if pw.InFlight() != 0 || dw.InFlight() != 0 {
		t.Errorf("in flight after the request: prefill %d, decode %d", pw.InFlight(), dw.InFlight())
	}
}

func TestPDSGLangBootstrapPort(t *testing.T) {
	tests := []struct {
		name     string
		reported int
		handoff  int
		want     int32
	}{
		{"default", 0, 0, pd.DefaultBootstrapPort},
		{"reported by the engine", 9123, 0, 9123},
		{"override wins", 9123, 7000, 7000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			quick := func(_ context.Context, _ *sglang.GenerateRequest, send func(*sglang.GenerateResponse) error) error {
				return send(sgComplete(5, 0, 1))
			}
			prefill, decode := newPDSGLang(quick), newPDSGLang(quick)
			prefill.bootstrapPort = tt.reported
			pw, dw := prefill.worker(t, workers.RolePrefill), decode.worker(t, workers.RoleDecode)
			st, err := pd.Run(testutil.Context(t, 5*time.Second), pw, dw, pdRequest(), pd.Legs{BootstrapPorts: pd.NewBootstrapPorts(map[string]int{pw.Endpoint(): tt.handoff})})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := readAll(st); err != nil {
				t.Fatal(err)
			}
			for _, r := range []*sglang.GenerateRequest{<-prefill.reqs, <-decode.reqs} {
				if got := r.GetDisaggregatedParams().GetBootstrapPort(); got != tt.want {
					t.Errorf("bootstrap_port = %d, want %d", got, tt.want)
				}
			}
		})
	}
}

// legFailure checks err is a LegError of leg whose fault is of kind want.
func legFailure(t *testing.T, err error, leg string, want fault.Kind) {
	t.Helper()
	var le *pd.LegError
	if kind, _ := fault.KindOf(err); !errors.As(err, &le) || le.Leg != leg || kind != want {
		t.Fatalf("err = %v (kind %v), want a %s LegError of kind %v", err, kind, leg, want)
	}
}

func TestPDSGLangPrefillFailsBeforeFirstToken(t *testing.T) {
	tests := []struct {
		name string
		// decode's behaviour once released; wait is DecodeAbortWait.
		decode    func(e *pdSGLang, release chan struct{}) sglangScript
		wait      time.Duration
		release   bool
		wantAbort bool
	}{
		{"decode produces its first item, then is aborted", func(e *pdSGLang, release chan struct{}) sglangScript {
			return func(ctx context.Context, _ *sglang.GenerateRequest, send func(*sglang.GenerateResponse) error) error {
				if !e.hold(ctx, release) {
					return ctx.Err()
				}
				_ = send(sgChunk(1))
				e.hold(ctx, never)
				return ctx.Err()
			}
		}, 10 * time.Second, true, true},
		{"decode times out on the room by itself", func(e *pdSGLang, release chan struct{}) sglangScript {
			return func(ctx context.Context, _ *sglang.GenerateRequest, _ func(*sglang.GenerateResponse) error) error {
				if !e.hold(ctx, release) {
					return ctx.Err()
				}
				return status.Error(codes.DeadlineExceeded, "bootstrap room never arrived")
			}
		}, 10 * time.Second, true, false},
		{"decode silent: aborted after DecodeAbortWait", func(e *pdSGLang, release chan struct{}) sglangScript {
			return func(ctx context.Context, _ *sglang.GenerateRequest, _ func(*sglang.GenerateResponse) error) error {
				e.hold(ctx, release)
				return ctx.Err()
			}
		}, 300 * time.Millisecond, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefill := newPDSGLang(func(context.Context, *sglang.GenerateRequest, func(*sglang.GenerateResponse) error) error {
				return status.Error(codes.Internal, "prefill engine crashed")
			})
			decode := newPDSGLang(nil)
			release := make(chan struct{})
			decode.script = tt.decode(decode, release)
			pw, dw := prefill.worker(t, workers.RolePrefill), decode.worker(t, workers.RoleDecode)
			testutil.NoLeaks(t)

			st, err := pd.Run(testutil.Context(t, 5*time.Second), pw, dw, pdRequest(), pd.Legs{DecodeAbortWait: tt.wait})
			if err != nil {
				t.Fatal(err)
			}
			_, err = st.Recv()
			legFailure(t, err, "prefill", fault.Unavailable)
			<-decode.reqs
			testutil.Never(t, "decode leg aborted before its first item", 100*time.Millisecond, func() bool {
				return decode.abortCount() > 0 || decode.cancelCount() > 0
			})
			if st.DecodeStarted() {
				t.Error("DecodeStarted before the decode leg produced anything")
			}
			if tt.release {
				close(release)
			}
			testutil.Receive(t, st.Done(), "both legs to end")
			testutil.Eventually(t, "the decode call to return", func() bool { return decode.returnCount() == 1 })
			if got := decode.abortCount() == 1 && decode.cancelCount() == 1; got != tt.wantAbort {
				t.Errorf("decode aborted = %v (aborts %d, cancelled %d), want %v",
					got, decode.abortCount(), decode.cancelCount(), tt.wantAbort)
			}
			if st.Prefill().Err == nil || st.Decode().Err == nil {
				t.Errorf("results: prefill %+v, decode %+v", st.Prefill(), st.Decode())
			}
			if pw.InFlight() != 0 || dw.InFlight() != 0 {
				t.Errorf("in flight: prefill %d, decode %d", pw.InFlight(), dw.InFlight())
			}
		})
	}
}

func TestPDSGLangDecodeFailsBeforeFirstToken(t *testing.T) {
	prefill := newPDSGLang(nil)
	prefill.script = func(ctx context.Context, _ *sglang.GenerateRequest, _ func(*sglang.GenerateResponse) error) error {
		prefill.hold(ctx, never)
		return ctx.Err()
	}
	// The decode engine fails once the prefill engine holds the request:
	// failing at once, it could be refused before the prefill leg's call
	// reached its engine, which would then see the Abort but no call to
	// cancel (the call cancelled in the router, its handler never run).
	decode := newPDSGLang(func(ctx context.Context, _ *sglang.GenerateRequest, _ func(*sglang.GenerateResponse) error) error {
		select {
		case <-prefill.reqs:
		case <-ctx.Done():
			return ctx.Err()
		}
		return status.Error(codes.Unavailable, "decode engine gone")
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
	testutil.Eventually(t, "the prefill leg to be aborted", func() bool {
		return prefill.abortCount() == 1 && prefill.cancelCount() == 1
	})
	if st.Prefill().Err == nil {
		t.Error("an aborted prefill leg reports success")
	}
	// The error stays the answer.
	if _, again := st.Recv(); again != err {
		t.Errorf("second Recv = %v, want the same error", again)
	}
}

func TestPDSGLangClientCancels(t *testing.T) {
	t.Run("before the first token", func(t *testing.T) {
		prefill, decode := newPDSGLang(nil), newPDSGLang(nil)
		prefill.script = func(ctx context.Context, _ *sglang.GenerateRequest, _ func(*sglang.GenerateResponse) error) error {
			prefill.hold(ctx, never)
			return ctx.Err()
		}
		release := make(chan struct{})
		decode.script = func(ctx context.Context, _ *sglang.GenerateRequest, send func(*sglang.GenerateResponse) error) error {
			if !decode.hold(ctx, release) {
				return ctx.Err()
			}
			_ = send(sgChunk(1))
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
		<-prefill.reqs
		<-decode.reqs
		cancel()
		if _, err := st.Recv(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Recv = %v, want CANCELED", err)
		}
		testutil.Eventually(t, "the prefill leg to be aborted", func() bool {
			return prefill.abortCount() == 1 && prefill.cancelCount() == 1
		})
		testutil.Never(t, "decode leg aborted before its first item", 100*time.Millisecond, func() bool {
			return decode.abortCount() > 0 || decode.cancelCount() > 0
		})
		close(release)
		testutil.Receive(t, st.Done(), "both legs to end")
		testutil.Eventually(t, "the decode leg to be aborted after its first item", func() bool {
			return decode.abortCount() == 1 && decode.cancelCount() == 1
		})
	})

	t.Run("after the first token", func(t *testing.T) {
		prefill := newPDSGLang(func(_ context.Context, _ *sglang.GenerateRequest, send func(*sglang.GenerateResponse) error) error {
			return send(sgComplete(5, 0, 1))
		})
		decode := newPDSGLang(nil)
		decode.script = func(ctx context.Context, _ *sglang.GenerateRequest, send func(*sglang.GenerateResponse) error) error {
			_ = send(sgChunk(1))
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
		if c, err := st.Recv(); err != nil || !slices.Equal(c.TokenIDs, []uint32{1}) || !st.DecodeStarted() {
			t.Fatalf("first item %+v, %v (started %v)", c, err, st.DecodeStarted())
		}
		testutil.Receive(t, st.PrefillDone(), "the prefill leg to end")
		cancel()
		if _, err := st.Recv(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Recv after cancel = %v, want CANCELED", err)
		}
		testutil.Receive(t, st.Done(), "both legs to end")
		testutil.Eventually(t, "the decode leg to be aborted", func() bool {
			return decode.abortCount() == 1 && decode.cancelCount() == 1
		})
		if prefill.abortCount() != 0 {
			t.Error("a finished prefill leg was aborted")
		}
		if st.Decode().Err == nil {
			t.Error("a cancelled decode leg reports success")
		}
	})
}

// TestRunRefusesPairsThatCannotDisaggregate: a pair whose protocols differ,
// or whose protocol has no disaggregation (TensorRT-LLM's), is refused as a
// precondition before either engine sees a request.
func TestRunRefusesPairsThatCannotDisaggregate(t *testing.T) {
	trtPrefillSrv, trtPrefill := simtest.Worker(t, simtest.Config(sim.ProtocolTRTLLM))
	trtDecodeSrv, trtDecode := simtest.Worker(t, simtest.Config(sim.ProtocolTRTLLM))
	tests := []struct {
		name            string
		prefill, decode *workers.Worker
		want            string
	}{
		{"protocols differ", newPDSGLang(nil).worker(t, workers.RolePrefill), newPDVLLM(nil).worker(t, workers.RoleDecode), "must speak one protocol"},
		{"TensorRT-LLM has no disaggregation", trtPrefill, trtDecode, "trtllm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := pd.Run(testutil.Context(t, 5*time.Second), tt.prefill, tt.decode, pdRequest(), pd.Legs{})
			if k, ok := fault.KindOf(err); !ok || k != fault.Precondition || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v (kind %v), want a precondition fault naming %q", err, k, tt.want)
			}
		})
	}
	if n := trtPrefillSrv.Engine().Stats().Requests + trtDecodeSrv.Engine().Stats().Requests; n != 0 {
		t.Errorf("the TensorRT-LLM engines saw %d requests", n)
	}
}

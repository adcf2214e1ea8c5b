package pd_test

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestAttempt pins an attempt's life against simulated engines of each
// protocol: one never started gives its room and its held counts back at
// End; a started one's legs take the counts over, so each worker's load
// reads one request, never two, and nothing once both legs have ended; it
// reports its prefill leg once and measures the handoff from that leg's
// end.
func TestAttempt(t *testing.T) {
	for _, protocol := range []string{sim.ProtocolSGLang, sim.ProtocolVLLM} {
		t.Run(protocol, func(t *testing.T) {
			_, pw := pdEngine(t, protocol, sim.RolePrefill)
			_, dw := pdEngine(t, protocol, sim.RoleDecode)
			d := pd.New(pd.Config{Prefill: mustPolicy(t, "cache_aware"), Decode: mustPolicy(t, "round_robin")})
			prompt := make([]uint32, 48)
			for i := range prompt {
				prompt[i] = uint32(100 + i)
			}
			place := func(id string) *pd.Attempt {
				preq := &policy.Request{RequestID: id, InputIDs: prompt}
				dec, err := d.Select(t.Context(), preq, []*workers.Worker{pw}, []*workers.Worker{dw})
				if err != nil {
					t.Fatal(err)
				}
				return d.NewAttempt(dec, preq)
			}

			inFlight := func(when string, wantPrefill, wantDecode int) {
				t.Helper()
				if p, d := pw.InFlight(), dw.InFlight(); p > wantPrefill || d > wantDecode {
					t.Errorf("%s: %d requests in flight on the prefill worker and %d on the decode worker, want at most %d and %d",
						when, p, d, wantPrefill, wantDecode)
				}
			}

			unused := place("never-started")
			unused.Hold()
			if d.RoomsInFlight() != 1 {
				t.Fatalf("rooms in flight after a placement = %d, want 1", d.RoomsInFlight())
			}
			if pw.InFlight() != 1 || dw.InFlight() != 1 {
				t.Errorf("after Hold: %d and %d requests in flight on the prefill and decode workers, want 1 and 1", pw.InFlight(), dw.InFlight())
			}
			if unused.End() {
				t.Error("End of an attempt never started reports it started")
			}
			if d.RoomsInFlight() != 0 {
				t.Errorf("rooms in flight after End of an attempt never started = %d, want 0", d.RoomsInFlight())
			}
			inFlight("after End of an attempt never started", 0, 0)

			a := place("started")
			a.Hold()
			before := time.Now()
			prefilled := make(chan pd.PrefillResult, 2)
			st, err := a.Start(t.Context(), &workers.GenerateRequest{RequestID: "started", InputIDs: prompt,
				Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](4)}}, func(r pd.PrefillResult) { prefilled <- r })
			if err != nil {
				t.Fatal(err)
			}
			inFlight("once the legs started", 1, 1)
			for {
				_, err := st.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			r := <-prefilled
			if r.Err != nil || r.PromptTokens != uint32(len(prompt)) {
				t.Errorf("prefill leg: %+v; want its %d prompt tokens and no error", r, len(prompt))
			}
			if h := a.Handoff(before); h != 0 {
				t.Errorf("Handoff at a time before the prefill leg ended = %v, want 0", h)
			}
			if h := a.Handoff(time.Now()); h <= 0 {
				t.Errorf("Handoff after the prefill leg ended = %v, want > 0", h)
			}
			<-st.Done()
			inFlight("once both legs ended, before the attempt's End", 0, 0)
			if !a.End() {
				t.Error("End of a started attempt reports it never started")
			}
			select {
			case r := <-prefilled:
				t.Errorf("the prefill leg was reported twice, again with %+v", r)
			default:
			}
		})
	}
}

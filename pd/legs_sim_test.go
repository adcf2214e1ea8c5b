package pd_test

// Disaggregated requests against the simulated engine's prefill and decode
// roles, both protocols through one test body: the decode engine really
// waits for the room the prefill engine publishes, and every fault ends with
// the documented status and both legs released.

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/pd"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// startPDSim serves a delay-free simulated engine in role and connects a
// worker to it (the SGLang worker learns the bootstrap port from
// GetServerInfo).
func startPDSim(t *testing.T, protocol, role string, faults sim.Faults) (*sim.Process, *workers.Worker) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Protocol = protocol
	cfg.Role = role
	cfg.TimeScale = 0
	cfg.TokenizerDir = "none"
	cfg.VocabSize = 128256
	cfg.EOSTokenID = 128001
	cfg.MaxContextLength = 4096
	cfg.KVCapacityTokens = 8192
	cfg.BootstrapTimeout = 300 * time.Millisecond
	cfg.Faults = faults
	cfg.Logger = slog.New(slog.DiscardHandler)
	srv, err := sim.Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	wrole := workers.RolePrefill
	if role == sim.RoleDecode {
		wrole = workers.RoleDecode
	}
	w, err := workers.Connect(testutil.Context(t, 5*time.Second), srv.Addr(), workers.ConnectOptions{Role: wrole})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return srv, w
}

// simProtocols are the simulator's protocols with prefill/decode
// disaggregation.
var simProtocols = []struct {
	name  string
	proto workers.Protocol
}{
	{sim.ProtocolSGLang, workers.ProtocolSGLang},
	{sim.ProtocolVLLM, workers.ProtocolVLLM},
}

func simPDRequest(id string) *workers.GenerateRequest {
	return &workers.GenerateRequest{
		RequestID: id,
		InputIDs:  testutil.Tokens(1000, 100),
		Sampling:  workers.Sampling{MaxNewTokens: ptr(uint32(8)), IgnoreEOS: true},
	}
}

func TestPDSimHappyPath(t *testing.T) {
	for _, p := range simProtocols {
		t.Run(p.name, func(t *testing.T) {
			ps, pw := startPDSim(t, p.name, sim.RolePrefill, sim.Faults{})
			ds, dw := startPDSim(t, p.name, sim.RoleDecode, sim.Faults{})
			noPDGoroutines(t)
			if p.proto == workers.ProtocolSGLang && pw.Info().BootstrapPort != ps.Engine().BootstrapPort() {
				t.Errorf("learnt bootstrap port %d, engine has %d", pw.Info().BootstrapPort, ps.Engine().BootstrapPort())
			}
			for i, wantCached := range []bool{false, true} {
				st, err := pd.Run(testutil.Context(t, 5*time.Second), pw, dw, simPDRequest("sim-"+p.name), pd.Legs{Room: int32(100 + i)})
				if err != nil {
					t.Fatal(err)
				}
				tokens, fin, err := readAll(st)
				if err != nil || len(tokens) != 8 || fin == nil || fin.CompletionTokens != 8 {
					t.Fatalf("request %d: %d tokens, completion %+v, err %v", i, len(tokens), fin, err)
				}
				testutil.Receive(t, st.Done(), "both legs to end")
				pr := st.Prefill()
				if pr.Err != nil || pr.PromptTokens != 100 || (pr.CachedTokens > 0) != wantCached {
					t.Errorf("request %d: prefill result %+v (want cached: %v)", i, pr, wantCached)
				}
			}
			pst, dst := ps.Engine().Stats(), ds.Engine().Stats()
			if pst.RoomsPublished != 2 || pst.RoomsFetched != 2 || dst.RoomWaits != 2 || dst.TransferTokens != 200 || dst.RoomTimeouts != 0 {
				t.Errorf("prefill published %d fetched %d; decode waited %d, transferred %d tokens, timed out %d",
					pst.RoomsPublished, pst.RoomsFetched, dst.RoomWaits, dst.TransferTokens, dst.RoomTimeouts)
			}
			if pst.AbortCalls+dst.AbortCalls != 0 {
				t.Errorf("aborts on a clean run: prefill %d, decode %d", pst.AbortCalls, dst.AbortCalls)
			}
			if pw.InFlight() != 0 || dw.InFlight() != 0 {
				t.Errorf("in flight: prefill %d, decode %d", pw.InFlight(), dw.InFlight())
			}
		})
	}
}

func TestPDSimFaults(t *testing.T) {
	tests := []struct {
		name            string
		prefill, decode sim.Faults
		leg             string
		kind            fault.Kind
	}{
		{"prefill engine unavailable", sim.Faults{Unavailable: true}, sim.Faults{}, "prefill", fault.Unavailable},
		{"prefill engine dies mid-request", sim.Faults{DropAfterTokens: 1}, sim.Faults{}, "prefill", fault.Unavailable},
		{"bootstrap never completes", sim.Faults{NeverPublish: true}, sim.Faults{}, "decode", fault.Unavailable},
		{"decode engine unavailable", sim.Faults{}, sim.Faults{Unavailable: true}, "decode", fault.Unavailable},
	}
	for _, p := range simProtocols {
		for _, tt := range tests {
			t.Run(p.name+"/"+tt.name, func(t *testing.T) {
				ps, pw := startPDSim(t, p.name, sim.RolePrefill, tt.prefill)
				ds, dw := startPDSim(t, p.name, sim.RoleDecode, tt.decode)
				noPDGoroutines(t)
				st, err := pd.Run(testutil.Context(t, 5*time.Second), pw, dw, simPDRequest("f"), pd.Legs{Room: 7})
				if err != nil {
					t.Fatal(err)
				}
				_, err = st.Recv()
				legFailure(t, err, tt.leg, tt.kind)
				testutil.Receive(t, st.Done(), "both legs to end")
				testutil.Eventually(t, "both engines to drop the request", func() bool {
					return ps.Engine().Stats().Running+ds.Engine().Stats().Running+ds.Engine().Stats().Transferring == 0
				})
				// Before its first item the decode leg is never aborted: it
				// ends by itself (a room timeout) or was never sent.
				if n := ds.Engine().Stats().AbortCalls; n != 0 {
					t.Errorf("decode engine got %d aborts", n)
				}
				if pw.InFlight() != 0 || dw.InFlight() != 0 {
					t.Errorf("in flight: prefill %d, decode %d", pw.InFlight(), dw.InFlight())
				}
			})
		}
	}
}

func TestPDSimClientCancels(t *testing.T) {
	for _, p := range simProtocols {
		t.Run(p.name+"/before the first token", func(t *testing.T) {
			// The prefill engine holds the request (and publishes nothing)
			// until it is aborted.
			ps, pw := startPDSim(t, p.name, sim.RolePrefill, sim.Faults{StallAfterTokens: 1})
			ds, dw := startPDSim(t, p.name, sim.RoleDecode, sim.Faults{})
			noPDGoroutines(t)
			ctx, cancel := context.WithCancel(testutil.Context(t, 5*time.Second))
			st, err := pd.Run(ctx, pw, dw, simPDRequest("c1"), pd.Legs{Room: 8})
			if err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "the prefill leg to run", func() bool { return ps.Engine().Stats().Running == 1 })
			cancel()
			if _, err := st.Recv(); !errors.Is(err, context.Canceled) {
				t.Fatalf("Recv = %v, want CANCELED", err)
			}
			testutil.Receive(t, st.Done(), "both legs to end")
			testutil.Eventually(t, "the prefill engine to drop the request", func() bool { return ps.Engine().Stats().Running == 0 })
			if ps.Engine().Stats().AbortCalls != 1 {
				t.Errorf("prefill engine got %d aborts, want 1", ps.Engine().Stats().AbortCalls)
			}
			if n := ds.Engine().Stats().AbortCalls; n != 0 {
				t.Errorf("decode engine aborted before its first item (%d aborts)", n)
			}
		})

		t.Run(p.name+"/after the first token", func(t *testing.T) {
			_, pw := startPDSim(t, p.name, sim.RolePrefill, sim.Faults{})
			ds, dw := startPDSim(t, p.name, sim.RoleDecode, sim.Faults{StallAfterTokens: 2})
			noPDGoroutines(t)
			ctx, cancel := context.WithCancel(testutil.Context(t, 5*time.Second))
			st, err := pd.Run(ctx, pw, dw, simPDRequest("c2"), pd.Legs{Room: 9})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
			cancel()
			for err == nil {
				_, err = st.Recv()
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Recv after cancel = %v, want CANCELED", err)
			}
			testutil.Receive(t, st.Done(), "both legs to end")
			testutil.Eventually(t, "the decode engine to drop the request", func() bool { return ds.Engine().Stats().Running == 0 })
			if ds.Engine().Stats().AbortCalls != 1 {
				t.Errorf("decode engine got %d aborts, want 1", ds.Engine().Stats().AbortCalls)
			}
			if dw.InFlight() != 0 || pw.InFlight() != 0 {
				t.Errorf("in flight: prefill %d, decode %d", pw.InFlight(), dw.InFlight())
			}
		})
	}
}

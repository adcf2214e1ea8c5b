package workers_test

// Data-parallel rank targets against a simulated engine with four ranks,
// both protocols: the targets, what reaches each rank (down to the bytes of
// the request), per-rank loads, and the shared connection's lifetime.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// The field numbers of data_parallel_rank in the engines' GenerateRequest,
// as smg-project/smg crates/grpc_client/proto/sglang_scheduler.proto (16)
// and vllm_engine.proto (9) define them. The test reads them from the bytes
// the engine receives, not from kvgate's generated code, so that a wrong
// number in api/proto could not pass.
const (
	sglangDPRankField protowire.Number = 16
	vllmDPRankField   protowire.Number = 9
)

// rawCapture is a server codec that keeps the bytes of every Generate
// request the engine receives, before decoding them.
type rawCapture struct {
	mu  sync.Mutex
	raw [][]byte
}

func (c *rawCapture) Name() string { return "proto" }

func (c *rawCapture) Marshal(v any) ([]byte, error) { return proto.Marshal(v.(proto.Message)) }

func (c *rawCapture) Unmarshal(data []byte, v any) error {
	switch v.(type) {
	case *sglang.GenerateRequest, *vllm.GenerateRequest:
		c.mu.Lock()
		c.raw = append(c.raw, append([]byte(nil), data...))
		c.mu.Unlock()
	}
	return proto.Unmarshal(data, v.(proto.Message))
}

func (c *rawCapture) last(t *testing.T) []byte {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.raw) == 0 {
		t.Fatal("the engine received no Generate request")
	}
	return c.raw[len(c.raw)-1]
}

// varintField returns the value of field num in a message's bytes, and
// whether the field is there at all.
func varintField(t *testing.T, b []byte, num protowire.Number) (uint64, bool) {
	t.Helper()
	var v uint64
	found := false
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(l))
		}
		b = b[l:]
		if n == num {
			if typ != protowire.VarintType {
				t.Fatalf("field %d has wire type %d, want varint", n, typ)
			}
			val, l := protowire.ConsumeVarint(b)
			if l < 0 {
				t.Fatal(protowire.ParseError(l))
			}
			v, found = val, true
			b = b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			t.Fatal(protowire.ParseError(l))
		}
		b = b[l:]
	}
	return v, found
}

// startDPSim serves a delay-free engine with ranks data-parallel ranks,
// capturing the Generate requests it receives.
func startDPSim(t *testing.T, protocol string, ranks int) (*sim.Engine, string, *rawCapture) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Protocol = protocol
	cfg.TimeScale = 0
	cfg.TokenizerDir = "none"
	cfg.VocabSize = 128256
	cfg.EOSTokenID = 128001
	cfg.MaxContextLength = 4096
	cfg.KVCapacityTokens = 8192
	cfg.DPSize = ranks
	cfg.Logger = slog.New(slog.DiscardHandler)
	e, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	capture := &rawCapture{}
	g := grpc.NewServer(grpc.ForceServerCodec(capture))
	e.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = g.Serve(lis)
	}()
	t.Cleanup(func() {
		g.Stop()
		e.Close()
		<-served
	})
	return e, lis.Addr().String(), capture
}

func connectAll(t *testing.T, addr string, dpAware bool) []*workers.Worker {
	t.Helper()
	ws, err := workers.ConnectAll(testutil.Context(t, 5*time.Second), addr, workers.ConnectOptions{DPAware: dpAware})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, w := range ws {
			_ = w.Close()
		}
	})
	return ws
}

func generateOn(t *testing.T, w *workers.Worker, id string, prompt []uint32) *workers.Completion {
	t.Helper()
	s, err := w.Backend().Generate(testutil.Context(t, 5*time.Second), &workers.GenerateRequest{RequestID: id, InputIDs: prompt,
		Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](4), IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	chunks := drain(t, s)
	return chunks[len(chunks)-1].Final
}

func TestDPRankTargets(t *testing.T) {
	for _, p := range simProtocols {
		t.Run(p.name, func(t *testing.T) {
			e, addr, capture := startDPSim(t, p.name, 4)
			url := "grpc://" + addr

			if ws := connectAll(t, addr, false); len(ws) != 1 || ws[0].URL() != url || ws[0].Rank() != -1 {
				t.Fatalf("without DP awareness: %v (rank %d), want the one engine %s", ws, ws[0].Rank(), url)
			}

			ws := connectAll(t, addr, true)
			if len(ws) != 4 {
				t.Fatalf("%d targets, want 4: %v", len(ws), ws)
			}
			for r, w := range ws {
				if w.URL() != fmt.Sprintf("%s@%d", url, r) || w.Rank() != r || w.Endpoint() != url {
					t.Errorf("target %d: URL %s rank %d endpoint %s", r, w.URL(), w.Rank(), w.Endpoint())
				}
				if c := w.Info().KVCapacityTokens; c != 8192 {
					t.Errorf("target %d: KV capacity %d, want the rank's 8192", r, c)
				}
			}

			field := sglangDPRankField
			if p.proto == workers.ProtocolVLLM {
				field = vllmDPRankField
			}
			for r, w := range ws {
				// A conversation's two turns on one target: the second finds
				// the first's pages in that rank's cache, and no other rank
				// saw either.
				prompt := testutil.Tokens(uint32(1000*(r+1)), 64)
				if fin := generateOn(t, w, fmt.Sprintf("r%d-1", r), prompt); fin.CachedTokens != 0 {
					t.Errorf("rank %d first turn: %d cached tokens", r, fin.CachedTokens)
				}
				// Both fields are optional: rank 0 is on the wire too, so the
				// engine cannot read it as "no rank".
				if v, found := varintField(t, capture.last(t), field); !found || v != uint64(r) {
					t.Errorf("rank %d: field %d on the wire = %d (present %v)", r, field, v, found)
				}
				turn2 := append(prompt, testutil.Tokens(9, 16)...)
				if fin := generateOn(t, w, fmt.Sprintf("r%d-2", r), turn2); fin.CachedTokens < 64 {
					t.Errorf("rank %d second turn: %d cached tokens, want >= 64", r, fin.CachedTokens)
				}
				if st := e.Rank(r).Stats(); st.Requests != 2 || st.CachedPromptTokens < 64 {
					t.Errorf("rank %d engine: %d requests, %d cached prompt tokens", r, st.Requests, st.CachedPromptTokens)
				}
			}
		})
	}
}

func TestDPRankLoadsAndHealth(t *testing.T) {
	for _, p := range simProtocols {
		t.Run(p.name, func(t *testing.T) {
			e, addr, _ := startDPSim(t, p.name, 4)
			ws := connectAll(t, addr, true)
			reg := workers.NewRegistry()
			if err := reg.AddAll(ws...); err != nil {
				t.Fatal(err)
			}
			// Two requests held on rank 2: the engine reports them there.
			e.SetFaults(sim.Faults{StallBeforeFirstToken: true})
			ctx, cancel := context.WithCancel(testutil.Context(t, 5*time.Second))
			defer cancel()
			for i := range 2 {
				if _, err := ws[2].Backend().Generate(ctx, &workers.GenerateRequest{RequestID: fmt.Sprint("held", i),
					InputIDs: testutil.Tokens(5, 20), Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](4)}}); err != nil {
					t.Fatal(err)
				}
			}
			testutil.Eventually(t, "two requests running on rank 2", func() bool { return e.Rank(2).Stats().Running == 2 })

			pctx, stop := context.WithCancel(testutil.Context(t, 5*time.Second))
			done := make(chan struct{})
			go func() {
				defer close(done)
				workers.RunLoadPolls(pctx, reg, 10*time.Millisecond, nil)
			}()
			testutil.Eventually(t, "rank 2 load polled", func() bool { return ws[2].EngineLoad().Running == 2 })
			stop()
			<-done
			for r, w := range ws {
				if want := map[bool]int{true: 2}[r == 2]; w.EngineLoad().Running != want {
					t.Errorf("rank %d: engine load %+v, want %d running", r, w.EngineLoad(), want)
				}
			}
			if l, err := ws[2].Backend().Loads(testutil.Context(t, 5*time.Second)); err != nil || l.Running != 2 {
				t.Errorf("rank 2 Loads = %+v, %v", l, err)
			}
			// An abort through any rank reaches the engine, which finds the
			// request on its rank.
			if err := ws[0].Backend().Abort(testutil.Context(t, 5*time.Second), "held0"); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "the abort on rank 2", func() bool { return e.Rank(2).Stats().Aborted == 1 })
			cancel()

			// One health answer for the engine, applied to every rank.
			e.SetFaults(sim.Faults{Unhealthy: true})
			hctx, hstop := context.WithCancel(testutil.Context(t, 5*time.Second))
			hdone := make(chan struct{})
			go func() {
				defer close(hdone)
				workers.RunHealthChecks(hctx, reg, workers.HealthConfig{Interval: 10 * time.Millisecond, FailureThreshold: 1}, nil)
			}()
			testutil.Eventually(t, "every rank unhealthy", func() bool {
				for _, w := range ws {
					if w.Healthy() {
						return false
					}
				}
				return true
			})
			hstop()
			<-hdone
		})
	}
}

func TestDPRanksShareTheConnection(t *testing.T) {
	_, addr, _ := startDPSim(t, sim.ProtocolVLLM, 4)
	ws, err := workers.ConnectAll(testutil.Context(t, 5*time.Second), addr, workers.ConnectOptions{DPAware: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws[:3] {
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The last rank still reaches the engine; closing it closes the
	// connection, and then nothing does.
	generateOn(t, ws[3], "last", testutil.Tokens(7, 20))
	if err := ws[3].Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ws[3].Backend().Generate(testutil.Context(t, 5*time.Second), &workers.GenerateRequest{RequestID: "closed", InputIDs: testutil.Tokens(7, 20)}); err == nil {
		t.Fatal("Generate after the last rank closed succeeded")
	}
}

func TestRankNames(t *testing.T) {
	for _, tt := range []struct {
		name string
		addr string
		rank int
		ok   bool
	}{
		{"grpc://h:1@3", "grpc://h:1", 3, true},
		{"h:1@0", "h:1", 0, true},
		{"grpc://h:1", "", 0, false},
		{"grpc://h:1@x", "", 0, false},
		{"grpc://h:1@-1", "", 0, false},
		{"grpc://h:1@03", "", 0, false},
	} {
		addr, rank, ok := workers.SplitRankName(tt.name)
		if addr != tt.addr || rank != tt.rank || ok != tt.ok {
			t.Errorf("SplitRankName(%q) = %q, %d, %v", tt.name, addr, rank, ok)
		}
	}
}

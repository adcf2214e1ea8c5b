package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/internal/testutil"
)

func TestPDGenerate(t *testing.T) {
	forEachPD(t, nil, nil, func(t *testing.T, pp *pdPair) {
		p := prompt(1, 100)
		for i, wantCached := range []uint32{0, 96} { // the second time, 6 whole pages are cached
			pre, dec := runPD(t, pp, p, int32(10+i), 20)
			if !pre.final || pre.finishReason != "length" || pre.prompt != 100 || pre.cached != wantCached {
				t.Fatalf("run %d: prefill completion %+v", i, pre)
			}
			if wantOut := map[string]int{ProtocolSGLang: 0, ProtocolVLLM: 1}[pp.protocol]; len(pre.outputIDs) != wantOut || int(pre.completion) != wantOut {
				t.Fatalf("run %d: prefill output %v (completion %d), want %d tokens", i, pre.outputIDs, pre.completion, wantOut)
			}
			if dec.err != nil || dec.final == nil || len(dec.final.outputIDs) != 20 || dec.final.finishReason != "length" ||
				len(dec.streamed()) != 20 || dec.final.cached != wantCached || dec.final.prompt != 100 {
				t.Fatalf("run %d: decode leg: err %v final %+v", i, dec.err, dec.final)
			}
			if pp.protocol == ProtocolVLLM && pre.outputIDs[0] != dec.final.outputIDs[0] {
				t.Errorf("the prefill leg's token %d differs from the decode leg's first %d", pre.outputIDs[0], dec.final.outputIDs[0])
			}
		}
		ps, ds := pp.p.Engine().Stats(), pp.d.Engine().Stats()
		if ps.RoomsPublished != 2 || ps.RoomsFetched != 2 || ps.RoomsHeld != 0 || ps.Completed != 2 || ps.Running != 0 {
			t.Errorf("prefill stats %+v", ps)
		}
		if ds.RoomWaits != 2 || ds.RoomTimeouts != 0 || ds.TransferTokens != 200 || ds.Completed != 2 || ds.Transferring != 0 {
			t.Errorf("decode stats %+v", ds)
		}
		// The decode engine charged no prefill, but holds the transferred pages.
		if ds.CachedPages < 6 {
			t.Errorf("decode engine caches %d pages, want the transferred prompt's 6 at least", ds.CachedPages)
		}
	})
}

func TestPDRoomNeverArrives(t *testing.T) {
	forEachPD(t, nil, nil, func(t *testing.T, pp *pdPair) {
		ctx := context.Background()
		start := time.Now()
		recv, err := pp.decode(ctx, "lonely", prompt(1, 40), 4, pp.handoffFor(77))
		if err != nil {
			t.Fatal(err)
		}
		r := collect(recv)
		wantCode(t, r.err, codes.Unavailable, "bootstrap room ")
		wantCode(t, r.err, codes.Unavailable, "never arrived from "+pp.p.Engine().BootstrapHost())
		if el := time.Since(start); el < 200*time.Millisecond || el > 3*time.Second {
			t.Errorf("failed after %v, want about the 200ms BootstrapTimeout", el)
		}
		if s := pp.d.Engine().Stats(); s.RoomTimeouts != 1 || s.Transferring != 0 || s.Running != 0 || s.Failed != 1 {
			t.Errorf("decode stats %+v", s)
		}
	})
}

func TestPDUnreachableBootstrap(t *testing.T) {
	pp := startPD(t, ProtocolSGLang, nil, nil)
	h := pp.handoffFor(1)
	pp.p.Stop() // the prefill engine is gone: decode retries until its timeout
	recv, err := pp.decode(context.Background(), "orphan", prompt(1, 40), 4, h)
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, collect(recv).err, codes.Unavailable, "last error")
}

func TestPDNeverPublish(t *testing.T) {
	forEachPD(t, func(c *Config) { c.Faults.NeverPublish = true }, nil, func(t *testing.T, pp *pdPair) {
		ctx := context.Background()
		pre, h, err := pp.prefill(ctx, prompt(1, 40), 5)
		if err != nil || pre.finishReason != "length" {
			t.Fatalf("prefill leg: %v %+v", err, pre)
		}
		recv, err := pp.decode(ctx, "d", prompt(1, 40), 4, h)
		if err != nil {
			t.Fatal(err)
		}
		wantCode(t, collect(recv).err, codes.Unavailable, "never arrived")
		if s := pp.p.Engine().Stats(); s.RoomsPublished != 0 || s.Completed != 1 {
			t.Errorf("prefill stats %+v", s)
		}
	})
}

func TestPDPrefillFaults(t *testing.T) {
	for _, f := range []Faults{{DropAfterTokens: 1}, {Unavailable: true}} {
		forEachPD(t, func(c *Config) { c.Faults = f }, nil, func(t *testing.T, pp *pdPair) {
			_, _, err := pp.prefill(context.Background(), prompt(1, 40), 5)
			wantCode(t, err, codes.Unavailable, "injected fault")
			if s := pp.p.Engine().Stats(); s.RoomsPublished != 0 || s.Running != 0 || s.Completed != 0 {
				t.Errorf("prefill stats %+v", s)
			}
		})
	}
}

func TestPDCancelAndAbortWhileWaiting(t *testing.T) {
	long := func(c *Config) { c.BootstrapTimeout = 30 * time.Second }
	forEachPD(t, nil, long, func(t *testing.T, pp *pdPair) {
		e := pp.d.Engine()
		// The client goes away.
		ctx, cancel := context.WithCancel(context.Background())
		recv, err := pp.decode(ctx, "cancelled", prompt(1, 40), 4, pp.handoffFor(1))
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the decode leg to wait", func() bool { return e.Stats().Transferring == 1 })
		start := time.Now()
		cancel()
		wantCode(t, collect(recv).err, codes.Canceled, "")
		testutil.Eventually(t, "the decode leg to be freed", func() bool { s := e.Stats(); return s.Transferring == 0 && s.Cancelled == 1 })
		// An Abort ends the wait with finish_reason "abort".
		recv, err = pp.decode(context.Background(), "aborted", prompt(1, 40), 4, pp.handoffFor(2))
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the decode leg to wait", func() bool { return e.Stats().Transferring == 1 })
		if err := pp.dc.abort(context.Background(), "aborted"); err != nil {
			t.Fatal(err)
		}
		r := collect(recv)
		if r.err != nil || r.final == nil || r.final.finishReason != "abort" {
			t.Fatalf("aborted decode leg: %v %+v", r.err, r.final)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("cancel and abort took %v; the wait must end at once", el)
		}
		if s := e.Stats(); s.Transferring != 0 || s.Aborted != 1 || s.RoomTimeouts != 0 || len(e.reqs) != 0 {
			t.Errorf("decode stats %+v", s)
		}
	})
}

func TestPDUnfetchedRoomsExpire(t *testing.T) {
	forEachPD(t, func(c *Config) { c.BootstrapTimeout = 20 * time.Millisecond }, nil, func(t *testing.T, pp *pdPair) {
		if _, _, err := pp.prefill(context.Background(), prompt(1, 40), 3); err != nil {
			t.Fatal(err)
		}
		e := pp.p.Engine()
		if s := e.Stats(); s.RoomsPublished != 1 {
			t.Fatalf("prefill stats %+v", s)
		}
		testutil.Eventually(t, "the room to expire", func() bool { s := e.Stats(); return s.RoomsHeld == 0 && s.RoomsExpired == 1 })
	})
}

func TestPDInputHashMismatch(t *testing.T) {
	forEachPD(t, nil, nil, func(t *testing.T, pp *pdPair) {
		ctx := context.Background()
		_, h, err := pp.prefill(ctx, prompt(1, 40), 9)
		if err != nil {
			t.Fatal(err)
		}
		recv, err := pp.decode(ctx, "other", prompt(2, 40), 4, h)
		if err != nil {
			t.Fatal(err)
		}
		wantCode(t, collect(recv).err, codes.FailedPrecondition, "different prompt")
		if s := pp.d.Engine().Stats(); s.Running != 0 || s.Transferring != 0 || s.TransferTokens != 0 {
			t.Errorf("decode stats %+v", s)
		}
	})
}

func TestPDBootstrapEndpoint(t *testing.T) {
	pp := startPD(t, ProtocolSGLang, nil, nil)
	h := pp.handoffFor(0)
	get := func(query string) int {
		resp, err := http.Get(fmt.Sprintf("http://%s:%d/bootstrap/rooms/4%s", h.host, h.port, query))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get("?wait_ms=0"); c != http.StatusNotFound {
		t.Errorf("unpublished room: %d, want 404", c)
	}
	if c := get("?wait_ms=x"); c != http.StatusBadRequest {
		t.Errorf("bad wait_ms: %d, want 400", c)
	}
	if _, _, err := pp.prefill(context.Background(), prompt(1, 40), 4); err != nil {
		t.Fatal(err)
	}
	if c := get(""); c != http.StatusOK {
		t.Errorf("published room: %d, want 200", c)
	}
	if c := get(""); c != http.StatusNotFound {
		t.Errorf("room fetched twice: %d, want 404", c)
	}
}

func TestPDInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
	}{
		{"unknown role", func(c *Config) { c.Role = "both" }},
		{"decode without timeout", func(c *Config) { c.Role, c.BootstrapTimeout = RoleDecode, 0 }},
		{"decode without transfer speed", func(c *Config) { c.Role, c.KVTransferGBps = RoleDecode, 0 }},
		{"bad bootstrap port", func(c *Config) { c.Role, c.BootstrapPort = RolePrefill, 70000 }},
	} {
		cfg := testConfig(ProtocolSGLang)
		tc.cfg(&cfg)
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", tc.name, err)
		}
	}
	forEachPD(t, nil, nil, func(t *testing.T, pp *pdPair) {
		// Plain requests, without PD parameters, to either role.
		for _, c := range []client{pp.pc, pp.dc} {
			r := generate(t, c, genParams{prompt: prompt(1, 10), maxNew: u32(2)})
			wantCode(t, r.err, codes.InvalidArgument, "engine needs")
		}
		if pp.protocol == ProtocolVLLM {
			kv := `{"do_remote_decode": true}`
			st, err := pp.pvl.Generate(context.Background(), &vllm.GenerateRequest{
				Input:          &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: prompt(1, 10)}},
				SamplingParams: &vllm.SamplingParams{MaxTokens: u32(5)}, KvTransferParamsJson: &kv})
			if err == nil {
				_, err = st.Recv()
			}
			wantCode(t, err, codes.InvalidArgument, "max_tokens must be 1")
			// A decode leg given the prefill leg's parameters.
			recv, err := pp.decode(context.Background(), "x", prompt(1, 10), 2, handoff{kvJSON: kv})
			if err == nil {
				_, err = recv()
			}
			wantCode(t, err, codes.InvalidArgument, "do_remote_prefill")
		} else {
			recv, err := pp.decode(context.Background(), "x", prompt(1, 10), 2, handoff{room: 1})
			if err == nil {
				_, err = recv()
			}
			wantCode(t, err, codes.InvalidArgument, "bootstrap_host")
		}
	})
}

func TestPDRegularIgnoresParams(t *testing.T) {
	forEachProtocol(t, nil, func(t *testing.T, srv *Process, _ client) {
		pp := &pdPair{protocol: srv.Engine().cfg.Protocol, d: srv}
		if pp.protocol == ProtocolSGLang {
			pp.dsg = sglang.NewSglangSchedulerClient(testutil.Dial(t, srv.Addr()))
		} else {
			pp.dvl = vllm.NewVllmEngineClient(testutil.Dial(t, srv.Addr()))
		}
		recv, err := pp.decode(context.Background(), "r", prompt(1, 10), 3, handoff{host: "127.0.0.1", port: 1, room: 1})
		if err != nil {
			t.Fatal(err)
		}
		if r := collect(recv); r.err != nil || r.final == nil || len(r.final.outputIDs) != 3 {
			t.Fatalf("regular engine with PD params: %v %+v", r.err, r.final)
		}
	})
}

func TestPDServerInfo(t *testing.T) {
	ctx := context.Background()
	sg := startPD(t, ProtocolSGLang, nil, nil)
	for _, tc := range []struct {
		c        sglang.SglangSchedulerClient
		mode     string
		wantPort bool
	}{{sg.psg, RolePrefill, true}, {sg.dsg, RoleDecode, false}} {
		si, err := tc.c.GetServerInfo(ctx, &sglang.GetServerInfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		args := si.GetServerArgs().GetFields()
		port, hasPort := args["disaggregation_bootstrap_port"]
		if args["disaggregation_mode"].GetStringValue() != tc.mode || hasPort != tc.wantPort ||
			(hasPort && int(port.GetNumberValue()) != sg.p.Engine().BootstrapPort()) {
			t.Errorf("%s server_args: %v", tc.mode, args)
		}
	}
	vl := startPD(t, ProtocolVLLM, nil, nil)
	for _, tc := range []struct {
		c    vllm.VllmEngineClient
		role string
	}{{vl.pvl, "kv_producer"}, {vl.dvl, "kv_consumer"}} {
		si, err := tc.c.GetServerInfo(ctx, &vllm.GetServerInfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if si.GetKvConnector() != vllmKVConnector || si.GetKvRole() != tc.role {
			t.Errorf("%s server info: %v", tc.role, si)
		}
	}
	// The prefill leg's kv_transfer_params_json names the engine and room.
	_, h, err := vl.prefill(ctx, prompt(1, 20), 8)
	if err != nil {
		t.Fatal(err)
	}
	var kv map[string]any
	if err := json.Unmarshal([]byte(h.kvJSON), &kv); err != nil {
		t.Fatal(err)
	}
	port := vl.p.Engine().BootstrapPort()
	if kv["do_remote_prefill"] != true || kv["remote_host"] != "127.0.0.1" || int(kv["remote_port"].(float64)) != port ||
		kv["remote_request_id"] != roomID(8) || kv["remote_engine_id"] != fmt.Sprintf("kvgate-sim-8b-%d", port) {
		t.Errorf("kv_transfer_params_json %s", h.kvJSON)
	}
}

// TestPDNoGoroutineLeak runs disaggregated requests of every ending, stops
// both engines (one with a decode leg still waiting), and checks the
// goroutines they started end.
func TestPDNoGoroutineLeak(t *testing.T) {
	testutil.NoLeaks(t)
	for _, p := range protocols {
		t.Run(p, func(t *testing.T) {
			pp := startPD(t, p, nil, func(c *Config) { c.BootstrapTimeout = 30 * time.Second })
			runPD(t, pp, prompt(1, 50), 1, 5)
			ctx, cancel := context.WithCancel(context.Background())
			recv, err := pp.decode(ctx, "cancelled", prompt(1, 40), 4, pp.handoffFor(2))
			if err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "the decode leg to wait", func() bool { return pp.d.Engine().Stats().Transferring == 1 })
			cancel()
			collect(recv)
			recv, err = pp.decode(context.Background(), "closed", prompt(1, 40), 4, pp.handoffFor(3))
			if err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "the decode leg to wait", func() bool { return pp.d.Engine().Stats().Transferring == 1 })
			pp.d.Engine().Close()
			wantCode(t, collect(recv).err, codes.Unavailable, "shut down")
		})
	}
}

// TestPDTransferTime checks the decode leg charges prompt tokens x 128 KiB at
// KVTransferGBps, scaled by TimeScale, and no prefill.
func TestPDTransferTime(t *testing.T) {
	pp := startPD(t, ProtocolVLLM, nil, func(c *Config) {
		c.TimeScale, c.KVTransferGBps = 1, 0.1 // 100 tokens: 131 ms
		c.RequestOverhead, c.DecodeMsPerToken, c.DecodeMsPerRunning = 0, 0, 0
		c.PrefillTokensPerSec = 1 // a prefill charge would take minutes
	})
	ctx := context.Background()
	_, h, err := pp.prefill(ctx, prompt(1, 100), 1)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	recv, err := pp.decode(ctx, "d", prompt(1, 100), 2, h)
	if err != nil {
		t.Fatal(err)
	}
	if r := collect(recv); r.err != nil || r.final == nil {
		t.Fatalf("decode leg: %v", r.err)
	}
	if el, want := time.Since(start), transferTime(100, 0.1); el < want || el > want+2*time.Second {
		t.Errorf("decode leg took %v, want the %v transfer", el, want)
	}
}

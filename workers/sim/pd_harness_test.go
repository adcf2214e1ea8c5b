package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/internal/testutil"
)

// pdPair is a prefill and a decode engine of one protocol, with raw clients
// that send the PD parameters the router sends.
type pdPair struct {
	protocol string
	p, d     *Process
	pc, dc   client // neutral clients, for abort and plain requests
	psg, dsg sglang.SglangSchedulerClient
	pvl, dvl vllm.VllmEngineClient
}

// handoff is what the decode leg is told about the prefill leg: SGLang's
// disaggregated_params, or vLLM's kv_transfer_params_json.
type handoff struct {
	host   string
	port   int
	room   int32
	kvJSON string // vLLM: as returned by the prefill leg ("" = build from the rest)
}

func pdConfig(protocol, role string) Config {
	c := testConfig(protocol)
	c.Role = role
	c.BootstrapTimeout = 200 * time.Millisecond
	return c
}

func startPD(t *testing.T, protocol string, tweakP, tweakD func(*Config)) *pdPair {
	t.Helper()
	pc, dc := pdConfig(protocol, RolePrefill), pdConfig(protocol, RoleDecode)
	if tweakP != nil {
		tweakP(&pc)
	}
	if tweakD != nil {
		tweakD(&dc)
	}
	pp := &pdPair{protocol: protocol}
	pp.p, pp.pc = startSim(t, pc)
	pp.d, pp.dc = startSim(t, dc)
	if protocol == ProtocolSGLang {
		pp.psg, pp.dsg = sglang.NewSglangSchedulerClient(testutil.Dial(t, pp.p.Addr())), sglang.NewSglangSchedulerClient(testutil.Dial(t, pp.d.Addr()))
	} else {
		pp.pvl, pp.dvl = vllm.NewVllmEngineClient(testutil.Dial(t, pp.p.Addr())), vllm.NewVllmEngineClient(testutil.Dial(t, pp.d.Addr()))
	}
	return pp
}

func forEachPD(t *testing.T, tweakP, tweakD func(*Config), body func(t *testing.T, pp *pdPair)) {
	for _, p := range protocols {
		t.Run(p, func(t *testing.T) { body(t, startPD(t, p, tweakP, tweakD)) })
	}
}

// handoffFor is the handoff for room, pointing at the prefill engine.
func (pp *pdPair) handoffFor(room int32) handoff {
	e := pp.p.Engine()
	return handoff{host: e.BootstrapHost(), port: e.BootstrapPort(), room: room}
}

// roomID is the prefill leg's request id: vLLM names rooms by it.
func roomID(room int32) string { return fmt.Sprintf("pd-%d", room) }

// prefill sends the prefill leg and returns its one completion and, for
// vLLM, the handoff it returned.
func (pp *pdPair) prefill(ctx context.Context, prompt []uint32, room int32) (msg, handoff, error) {
	h := pp.handoffFor(room)
	var recv func() (msg, error)
	if pp.protocol == ProtocolSGLang {
		st, err := pp.psg.Generate(ctx, &sglang.GenerateRequest{RequestId: roomID(room) + "-p",
			Tokenized:           &sglang.TokenizedInput{InputIds: prompt},
			SamplingParams:      &sglang.SamplingParams{Temperature: 1, TopP: 1, TopK: -1, MaxNewTokens: u32(8)},
			Stream:              true,
			DisaggregatedParams: &sglang.DisaggregatedParams{BootstrapHost: h.host, BootstrapPort: int32(h.port), BootstrapRoom: room}})
		if err != nil {
			return msg{}, h, err
		}
		recv = sglangRecv(st.Recv)
	} else {
		kv := `{"do_remote_decode": true}`
		st, err := pp.pvl.Generate(ctx, &vllm.GenerateRequest{RequestId: roomID(room),
			Input:          &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: prompt}},
			SamplingParams: &vllm.SamplingParams{MaxTokens: u32(1)}, KvTransferParamsJson: &kv})
		if err != nil {
			return msg{}, h, err
		}
		var kvOut string
		recv = func() (msg, error) {
			r, err := st.Recv()
			if err != nil {
				return msg{}, err
			}
			if c := r.GetComplete(); c != nil {
				kvOut = c.GetKvTransferParamsJson()
			}
			return vllmMsg(r), nil
		}
		res := collect(recv)
		h.kvJSON = kvOut
		return finalOf(res), h, res.err
	}
	res := collect(recv)
	return finalOf(res), h, res.err
}

func finalOf(r result) msg {
	if r.final == nil {
		return msg{}
	}
	if len(r.chunks) > 0 {
		r.final.tokens = r.streamed()
	}
	return *r.final
}

// decode sends the decode leg and returns its stream.
func (pp *pdPair) decode(ctx context.Context, id string, prompt []uint32, maxNew uint32, h handoff) (func() (msg, error), error) {
	if pp.protocol == ProtocolSGLang {
		st, err := pp.dsg.Generate(ctx, &sglang.GenerateRequest{RequestId: id,
			Tokenized:           &sglang.TokenizedInput{InputIds: prompt},
			SamplingParams:      &sglang.SamplingParams{Temperature: 1, TopP: 1, TopK: -1, MaxNewTokens: u32(maxNew), IgnoreEos: true},
			Stream:              true,
			DisaggregatedParams: &sglang.DisaggregatedParams{BootstrapHost: h.host, BootstrapPort: int32(h.port), BootstrapRoom: h.room}})
		if err != nil {
			return nil, err
		}
		return sglangRecv(st.Recv), nil
	}
	kv := h.kvJSON
	if kv == "" {
		b, _ := json.Marshal(map[string]any{"do_remote_prefill": true, "remote_host": h.host, "remote_port": h.port,
			"remote_request_id": roomID(h.room)})
		kv = string(b)
	}
	st, err := pp.dvl.Generate(ctx, &vllm.GenerateRequest{RequestId: id,
		Input:          &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: prompt}},
		SamplingParams: &vllm.SamplingParams{MaxTokens: u32(maxNew), IgnoreEos: true}, Stream: true, KvTransferParamsJson: &kv})
	if err != nil {
		return nil, err
	}
	return func() (msg, error) {
		r, err := st.Recv()
		if err != nil {
			return msg{}, err
		}
		return vllmMsg(r), nil
	}, nil
}

func sglangRecv(recv func() (*sglang.GenerateResponse, error)) func() (msg, error) {
	return func() (msg, error) {
		r, err := recv()
		if err != nil {
			return msg{}, err
		}
		if ch := r.GetChunk(); ch != nil {
			return msg{tokens: ch.GetTokenIds(), prompt: ch.GetPromptTokens(), completion: ch.GetCompletionTokens(), cached: ch.GetCachedTokens()}, nil
		}
		c := r.GetComplete()
		return msg{final: true, outputIDs: c.GetOutputIds(), finishReason: c.GetFinishReason(),
			prompt: c.GetPromptTokens(), completion: c.GetCompletionTokens(), cached: c.GetCachedTokens()}, nil
	}
}

func vllmMsg(r *vllm.GenerateResponse) msg {
	if ch := r.GetChunk(); ch != nil {
		return msg{tokens: ch.GetTokenIds(), prompt: ch.GetPromptTokens(), completion: ch.GetCompletionTokens(), cached: ch.GetCachedTokens()}
	}
	c := r.GetComplete()
	return msg{final: true, outputIDs: c.GetOutputIds(), finishReason: c.GetFinishReason(),
		prompt: c.GetPromptTokens(), completion: c.GetCompletionTokens(), cached: c.GetCachedTokens()}
}

func wantCode(t *testing.T, err error, code codes.Code, contains string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), contains) {
		t.Fatalf("got %v, want %v containing %q", err, code, contains)
	}
}

// runPD runs one whole disaggregated request the way the router does: SGLang
// sends both legs at once (here the decode leg first, so it has to wait),
// vLLM sends them one after the other.
func runPD(t *testing.T, pp *pdPair, prompt []uint32, room int32, maxNew uint32) (pre msg, dec result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if pp.protocol == ProtocolVLLM {
		pre, h, err := pp.prefill(ctx, prompt, room)
		if err != nil {
			t.Fatalf("prefill leg: %v", err)
		}
		recv, err := pp.decode(ctx, roomID(room)+"-d", prompt, maxNew, h)
		if err != nil {
			t.Fatal(err)
		}
		return pre, collect(recv)
	}
	waits := pp.d.Engine().Stats().RoomWaits
	done := make(chan result, 1)
	recv, err := pp.decode(ctx, roomID(room)+"-d", prompt, maxNew, pp.handoffFor(room))
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- collect(recv) }()
	testutil.Eventually(t, "the decode leg to wait for its room", func() bool { return pp.d.Engine().Stats().RoomWaits > waits })
	pre, _, err = pp.prefill(ctx, prompt, room)
	if err != nil {
		t.Fatalf("prefill leg: %v", err)
	}
	return pre, <-done
}

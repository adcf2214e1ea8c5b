package sim

import (
	"context"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/internal/testutil"
)

func TestSGLangInfo(t *testing.T) {
	srv, _ := startSim(t, testConfig(ProtocolSGLang))
	c := sglang.NewSglangSchedulerClient(testutil.Dial(t, srv.Addr()))
	ctx := context.Background()

	mi, err := c.GetModelInfo(ctx, &sglang.GetModelInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if mi.GetServedModelName() != "kvgate-sim-8b" || mi.GetVocabSize() != 128256 || mi.GetMaxContextLength() != 2048 ||
		len(mi.GetEosTokenIds()) != 1 || mi.GetEosTokenIds()[0] != 128001 || mi.GetBosTokenId() != 128000 || !mi.GetIsGeneration() {
		t.Fatalf("model info: %v", mi)
	}
	si, err := c.GetServerInfo(ctx, &sglang.GetServerInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	args := si.GetServerArgs().GetFields()
	if args["page_size"].GetNumberValue() != 16 || args["max_running_requests"].GetNumberValue() != 256 ||
		args["model_path"].GetStringValue() != "kvgate-sim-8b" || args["served_model_name"].GetStringValue() != "kvgate-sim-8b" ||
		si.GetMaxTotalNumTokens() != 4096 {
		t.Fatalf("server info: %v", si)
	}

	// A seed that is not an integer is refused.
	cp, _ := structpb.NewStruct(map[string]any{"sampling_seed": 1.5})
	st, err := c.Generate(ctx, &sglang.GenerateRequest{Tokenized: &sglang.TokenizedInput{InputIds: []uint32{1, 2}},
		SamplingParams: &sglang.SamplingParams{CustomParams: cp}})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("fractional seed: %v", err)
	}

	// max_new_tokens unset: SGLang's default of 128.
	st, err = c.Generate(ctx, &sglang.GenerateRequest{Tokenized: &sglang.TokenizedInput{InputIds: []uint32{1, 2}},
		SamplingParams: &sglang.SamplingParams{Temperature: 1, IgnoreEos: true}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil || len(resp.GetComplete().GetOutputIds()) != sglangDefaultMaxNewTokens || !strings.HasPrefix(resp.GetRequestId(), "sim-") {
		t.Fatalf("default max_new_tokens: %d tokens, id %q, %v", len(resp.GetComplete().GetOutputIds()), resp.GetRequestId(), err)
	}
}

func TestSGLangFlushCache(t *testing.T) {
	srv, cl := startSim(t, testConfig(ProtocolSGLang))
	c := sglang.NewSglangSchedulerClient(testutil.Dial(t, srv.Addr()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mustComplete(t, cl, genParams{prompt: prompt(1, 40), maxNew: u32(4), ignoreEOS: true})
	recv, err := cl.subscribe(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the subscription", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })
	r, err := c.FlushCache(ctx, &smgcommon.FlushCacheRequest{})
	if err != nil || !r.GetSuccess() {
		t.Fatalf("flush: %v, %v", r, err)
	}
	if b, err := recv(); err != nil || b.GetEvents()[0].GetCleared() == nil {
		t.Fatalf("flush event: %v, %v", b, err)
	}
	if st := srv.Engine().Stats(); st.CachedPages != 0 {
		t.Fatalf("after flush: %+v", st)
	}
	if r := mustComplete(t, cl, genParams{prompt: prompt(1, 40), maxNew: u32(1)}); r.final.cached != 0 {
		t.Fatalf("cached %d after flush", r.final.cached)
	}
}

func TestVLLMSpecifics(t *testing.T) {
	cfg := testConfig(ProtocolVLLM)
	cfg.Faults.StallAfterTokens = 1
	srv, _ := startSim(t, cfg)
	c := vllm.NewVllmEngineClient(testutil.Dial(t, srv.Addr()))
	ctx := context.Background()

	si, err := c.GetServerInfo(ctx, &vllm.GetServerInfoRequest{})
	if err != nil || si.GetServerType() != "vllm-grpc" {
		t.Fatalf("server info: %v, %v", si, err)
	}
	mi, err := c.GetModelInfo(ctx, &vllm.GetModelInfoRequest{})
	if err != nil || mi.GetServedModelName() != "kvgate-sim-8b" || mi.GetVocabSize() != 128256 || mi.GetEosTokenIds()[0] != 128001 {
		t.Fatalf("model info: %v, %v", mi, err)
	}

	invalid := []*vllm.GenerateRequest{
		{Input: &vllm.GenerateRequest_Text{Text: "hello"}},
		{Input: &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: []uint32{1}}},
			SamplingParams: &vllm.SamplingParams{MaxTokens: u32(0)}},
		{Input: &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: []uint32{1}}},
			SamplingParams: &vllm.SamplingParams{MaxTokens: u32(2), MinTokens: 3}},
	}
	for i, req := range invalid {
		st, err := c.Generate(ctx, req)
		if err == nil {
			_, err = st.Recv()
		}
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("invalid request %d: %v", i, err)
		}
	}

	// One Abort RPC with two ids ends both requests.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var streams []vllm.VllmEngine_GenerateClient
	for _, id := range []string{"a", "b"} {
		st, err := c.Generate(sctx, &vllm.GenerateRequest{RequestId: id, Stream: true,
			Input:          &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: prompt(7, 20)}},
			SamplingParams: &vllm.SamplingParams{MaxTokens: u32(10)}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	if _, err := c.Abort(ctx, &vllm.AbortRequest{RequestIds: []string{"a", "b", "unknown"}}); err != nil {
		t.Fatal(err)
	}
	for i, st := range streams {
		r, err := st.Recv()
		if err != nil || r.GetComplete().GetFinishReason() != "abort" {
			t.Fatalf("stream %d: %v, %v", i, r, err)
		}
		if _, err := st.Recv(); err != io.EOF {
			t.Fatalf("stream %d after completion: %v", i, err)
		}
	}
	if s := srv.Engine().Stats(); s.AbortCalls != 1 || s.Aborted != 2 || s.Running != 0 {
		t.Fatalf("stats: %+v", s)
	}
}

func TestRegisterFlags(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	err := fs.Parse([]string{"--protocol=vllm", "-fail-after", "3", "--eos-token-id=5", "--request-overhead=1ms",
		"--time-scale=0", "--unhealthy", "--stall-after=4", "--fail-unavailable", "--kv-capacity-tokens=1000",
		"--kv-events", "off", "--kv-event-history=5", "--kv-event-drop-every=3", "--kv-event-duplicate-every", "2", "--kv-event-delay=50ms"})
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Protocol, want.EOSTokenID, want.RequestOverhead, want.TimeScale, want.KVCapacityTokens = ProtocolVLLM, 5, time.Millisecond, 0, 1000
	want.KVEvents, want.KVEventHistory = false, 5
	want.Faults = Faults{DropAfterTokens: 3, Unhealthy: true, StallAfterTokens: 4, Unavailable: true,
		KVEventDropEvery: 3, KVEventDuplicateEvery: 2, KVEventDelay: 50 * time.Millisecond}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("parsed %+v\nwant   %+v", cfg, want)
	}
	if f := fs.Lookup("kv-capacity-tokens"); !strings.Contains(f.Usage, "8B model on one H100") || f.DefValue != "400000" {
		t.Fatalf("kv-capacity-tokens flag: %+v", f)
	}
	if f := fs.Lookup("eos-token-id"); f.DefValue != "0" {
		t.Fatalf("eos-token-id default %q", f.DefValue)
	}
	if f := fs.Lookup("kv-events"); f.DefValue != "on" {
		t.Fatalf("kv-events default %q, want on", f.DefValue)
	}
}

// TestKVEventsFlag: --kv-events takes a state, on or off (true and false
// too, in any case), and refuses anything else.
func TestKVEventsFlag(t *testing.T) {
	tests := []struct {
		arg     string
		want    bool
		wantErr bool
	}{
		{arg: "on", want: true},
		{arg: "off", want: false},
		{arg: "true", want: true},
		{arg: "false", want: false},
		{arg: "OFF", want: false},
		{arg: "maybe", wantErr: true},
		{arg: "", wantErr: true},
	}
	for _, tt := range tests {
		cfg := DefaultConfig()
		cfg.KVEvents = !tt.want
		fs := flag.NewFlagSet("sim", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.RegisterFlags(fs)
		err := fs.Parse([]string{"--kv-events=" + tt.arg})
		switch {
		case tt.wantErr && err == nil:
			t.Errorf("--kv-events=%s: accepted, want an error", tt.arg)
		case !tt.wantErr && (err != nil || cfg.KVEvents != tt.want):
			t.Errorf("--kv-events=%s: KVEvents %v, err %v; want %v", tt.arg, cfg.KVEvents, err, tt.want)
		}
	}
}

// TestNoGoroutineLeak runs every kind of stream to its end, stops the
// server, and checks that none of the goroutines they started is left.
func TestNoGoroutineLeak(t *testing.T) {
	testutil.NoLeaks(t)
	func() {
		cfg := testConfig(ProtocolSGLang)
		srv, err := Start(cfg, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Stop()
		conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		c := sglangClient{sglang.NewSglangSchedulerClient(conn)}
		mustComplete(t, c, genParams{prompt: prompt(1, 40), maxNew: u32(8)})

		srv.Engine().SetFaults(Faults{StallAfterTokens: 1})
		ctx, cancel := context.WithCancel(context.Background())
		stalled(t, ctx, c, "cancelled", 1)
		stalled(t, context.Background(), c, "aborted", 1)
		if err := c.abort(context.Background(), "aborted"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.subscribe(ctx, 0); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the subscription", func() bool { return srv.Engine().Stats().KVSubscribers == 1 })
		cancel()
		testutil.Eventually(t, "streams to end", func() bool {
			st := srv.Engine().Stats()
			return st.Running == 0 && st.KVSubscribers == 0
		})
	}()
}

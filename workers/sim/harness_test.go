package sim

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/smgcommon"
	"github.com/kvgate/kvgate/api/gen/vllm"
)

// The tests talk to the simulator over real gRPC on loopback, through the
// generated clients, exactly as the router does. client hides the two
// protocols' message shapes so one test body covers both.

type genParams struct {
	id        string
	prompt    []uint32
	maxNew    *uint32
	minNew    uint32
	stopIDs   []uint32
	ignoreEOS bool
	seed      *int32
	greedy    bool
	noStream  bool
}

// msg is one Generate response in neutral terms.
type msg struct {
	requestID                  string // SGLang only
	tokens                     []uint32
	prompt, completion, cached uint32
	final                      bool
	outputIDs                  []uint32
	finishReason               string
	matched                    *uint32
}

type loads struct {
	running, waiting, used, max, maxRunning int32
	usage, hitRate                          float64
}

type client interface {
	generate(ctx context.Context, p genParams) (recv func() (msg, error), err error)
	abort(ctx context.Context, id string) error
	health(ctx context.Context) (bool, error)
	loads(ctx context.Context) (loads, error)
	subscribe(ctx context.Context, start uint64) (recv func() (*smgcommon.KvEventBatch, error), err error)
}

func u32(v uint32) *uint32 { return &v }
func i32(v int32) *int32   { return &v }

// testConfig is a fast engine: no delays, a small context and cache.
func testConfig(protocol string) Config {
	c := DefaultConfig()
	c.Protocol = protocol
	c.TimeScale = 0
	// A Llama-3-sized vocabulary and no tokenizer: these tests are about
	// token ids, not text.
	c.TokenizerDir = "none"
	c.VocabSize = 128256
	c.EOSTokenID = 128001
	c.MaxContextLength = 2048
	c.KVCapacityTokens = 4096
	c.Seed = 7
	c.Logger = slog.New(slog.DiscardHandler)
	return c
}

var protocols = []string{ProtocolSGLang, ProtocolVLLM}

// startSim starts a server for cfg and a client for it; both stop with t.
func startSim(t *testing.T, cfg Config) (*Process, client) {
	t.Helper()
	srv, err := Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	if cfg.Protocol == ProtocolSGLang {
		return srv, sglangClient{sglang.NewSglangSchedulerClient(conn)}
	}
	return srv, vllmClient{vllm.NewVllmEngineClient(conn)}
}

// forEachProtocol runs body against a fresh SGLang and a fresh vLLM engine.
func forEachProtocol(t *testing.T, tweak func(*Config), body func(t *testing.T, srv *Process, c client)) {
	for _, p := range protocols {
		t.Run(p, func(t *testing.T) {
			cfg := testConfig(p)
			if tweak != nil {
				tweak(&cfg)
			}
			srv, c := startSim(t, cfg)
			body(t, srv, c)
		})
	}
}

// result is a whole Generate stream, collected.
type result struct {
	chunks []msg
	final  *msg
	err    error
}

func (r result) streamed() []uint32 {
	var out []uint32
	for _, c := range r.chunks {
		out = append(out, c.tokens...)
	}
	return out
}

func collect(recv func() (msg, error)) result {
	var r result
	for {
		m, err := recv()
		if errors.Is(err, io.EOF) {
			return r
		}
		if err != nil {
			r.err = err
			return r
		}
		if m.final {
			r.final = &m
		} else {
			r.chunks = append(r.chunks, m)
		}
	}
}

func generate(t *testing.T, c client, p genParams) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recv, err := c.generate(ctx, p)
	if err != nil {
		return result{err: err}
	}
	return collect(recv)
}

// mustComplete runs p and fails the test unless it completes.
func mustComplete(t *testing.T, c client, p genParams) result {
	t.Helper()
	r := generate(t, c, p)
	if r.err != nil || r.final == nil {
		t.Fatalf("generate: err %v, final %v", r.err, r.final)
	}
	return r
}

type sglangClient struct{ c sglang.SglangSchedulerClient }

func (s sglangClient) generate(ctx context.Context, p genParams) (func() (msg, error), error) {
	sp := &sglang.SamplingParams{Temperature: 1, TopP: 1, TopK: -1, MaxNewTokens: p.maxNew,
		MinNewTokens: p.minNew, StopTokenIds: p.stopIDs, IgnoreEos: p.ignoreEOS}
	if p.greedy {
		sp.Temperature = 0
	}
	if p.seed != nil {
		sp.CustomParams, _ = structpb.NewStruct(map[string]any{"sampling_seed": float64(*p.seed)})
	}
	st, err := s.c.Generate(ctx, &sglang.GenerateRequest{RequestId: p.id, Tokenized: &sglang.TokenizedInput{InputIds: p.prompt},
		SamplingParams: sp, Stream: !p.noStream})
	if err != nil {
		return nil, err
	}
	return func() (msg, error) {
		r, err := st.Recv()
		if err != nil {
			return msg{}, err
		}
		if ch := r.GetChunk(); ch != nil {
			return msg{requestID: r.GetRequestId(), tokens: ch.GetTokenIds(), prompt: ch.GetPromptTokens(),
				completion: ch.GetCompletionTokens(), cached: ch.GetCachedTokens()}, nil
		}
		c := r.GetComplete()
		m := msg{requestID: r.GetRequestId(), final: true, outputIDs: c.GetOutputIds(), finishReason: c.GetFinishReason(),
			prompt: c.GetPromptTokens(), completion: c.GetCompletionTokens(), cached: c.GetCachedTokens()}
		if mt, ok := c.GetMatchedStop().(*sglang.GenerateComplete_MatchedTokenId); ok {
			m.matched = &mt.MatchedTokenId
		}
		return m, nil
	}, nil
}

func (s sglangClient) abort(ctx context.Context, id string) error {
	_, err := s.c.Abort(ctx, &sglang.AbortRequest{RequestId: id})
	return err
}

func (s sglangClient) health(ctx context.Context) (bool, error) {
	r, err := s.c.HealthCheck(ctx, &sglang.HealthCheckRequest{})
	return r.GetHealthy(), err
}

func (s sglangClient) loads(ctx context.Context) (loads, error) {
	r, err := s.c.GetLoads(ctx, &sglang.GetLoadsRequest{})
	if err != nil || len(r.GetLoads()) != 1 {
		return loads{}, errors.Join(err, errors.New("want one SchedulerLoad"))
	}
	l := r.GetLoads()[0]
	if a := r.GetAggregate(); a.GetTotalRunningReqs() != l.GetNumRunningReqs() || a.GetTotalWaitingReqs() != l.GetNumWaitingReqs() {
		return loads{}, errors.New("aggregate disagrees with the single load")
	}
	return loads{running: l.GetNumRunningReqs(), waiting: l.GetNumWaitingReqs(), used: l.GetNumUsedTokens(),
		max: l.GetMaxTotalNumTokens(), maxRunning: l.GetMaxRunningRequests(), usage: l.GetTokenUsage(), hitRate: l.GetCacheHitRate()}, nil
}

func (s sglangClient) subscribe(ctx context.Context, start uint64) (func() (*smgcommon.KvEventBatch, error), error) {
	st, err := s.c.SubscribeKvEvents(ctx, &smgcommon.SubscribeKvEventsRequest{StartSequenceNumber: start})
	if err != nil {
		return nil, err
	}
	return st.Recv, nil
}

type vllmClient struct{ c vllm.VllmEngineClient }

func (v vllmClient) generate(ctx context.Context, p genParams) (func() (msg, error), error) {
	sp := &vllm.SamplingParams{MaxTokens: p.maxNew, MinTokens: p.minNew, StopTokenIds: p.stopIDs, IgnoreEos: p.ignoreEOS, Seed: p.seed}
	if p.greedy {
		var zero float32
		sp.Temperature = &zero
	}
	st, err := v.c.Generate(ctx, &vllm.GenerateRequest{RequestId: p.id,
		Input:          &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: p.prompt}},
		SamplingParams: sp, Stream: !p.noStream})
	if err != nil {
		return nil, err
	}
	return func() (msg, error) {
		r, err := st.Recv()
		if err != nil {
			return msg{}, err
		}
		if ch := r.GetChunk(); ch != nil {
			return msg{tokens: ch.GetTokenIds(), prompt: ch.GetPromptTokens(),
				completion: ch.GetCompletionTokens(), cached: ch.GetCachedTokens()}, nil
		}
		c := r.GetComplete()
		m := msg{final: true, outputIDs: c.GetOutputIds(), finishReason: c.GetFinishReason(),
			prompt: c.GetPromptTokens(), completion: c.GetCompletionTokens(), cached: c.GetCachedTokens()}
		if mt, ok := c.GetMatchedStop().(*vllm.GenerateComplete_MatchedTokenId); ok {
			m.matched = &mt.MatchedTokenId
		}
		return m, nil
	}, nil
}

func (v vllmClient) abort(ctx context.Context, id string) error {
	_, err := v.c.Abort(ctx, &vllm.AbortRequest{RequestIds: []string{id}})
	return err
}

func (v vllmClient) health(ctx context.Context) (bool, error) {
	r, err := v.c.HealthCheck(ctx, &vllm.HealthCheckRequest{})
	return r.GetHealthy(), err
}

func (v vllmClient) loads(ctx context.Context) (loads, error) {
	r, err := v.c.GetLoads(ctx, &vllm.GetLoadsRequest{})
	if err != nil || len(r.GetLoads()) != 1 {
		return loads{}, errors.Join(err, errors.New("want one SchedulerLoad"))
	}
	l := r.GetLoads()[0]
	return loads{running: l.GetNumRunningReqs(), waiting: l.GetNumWaitingReqs(), used: l.GetNumUsedTokens(),
		max: l.GetMaxTotalNumTokens(), maxRunning: l.GetMaxRunningRequests(), usage: l.GetTokenUsage(), hitRate: l.GetCacheHitRate()}, nil
}

func (v vllmClient) subscribe(ctx context.Context, start uint64) (func() (*smgcommon.KvEventBatch, error), error) {
	st, err := v.c.SubscribeKvEvents(ctx, &smgcommon.SubscribeKvEventsRequest{StartSequenceNumber: start})
	if err != nil {
		return nil, err
	}
	return st.Recv, nil
}

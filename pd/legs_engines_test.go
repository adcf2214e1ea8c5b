package pd_test

// Scripted engines for the disaggregation tests: real gRPC servers on loopback
// whose Generate runs a test's script, recording what each leg received,
// which requests were aborted (Abort RPC) and whose stream the router
// cancelled. A script blocks with hold, which returns early (false) when the
// router cancels the call.

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
)

// pdRecord is what a scripted PD engine saw.
type pdRecord struct {
	mu        sync.Mutex
	aborts    []string
	cancelled int // Generate calls whose context the router cancelled
	returned  int // Generate calls that returned
}

func (r *pdRecord) abortCount() int {
	return testutil.Locked(&r.mu, func() int { return len(r.aborts) })
}
func (r *pdRecord) cancelCount() int {
	return testutil.Locked(&r.mu, func() int { return r.cancelled })
}
func (r *pdRecord) returnCount() int { return testutil.Locked(&r.mu, func() int { return r.returned }) }

// hold waits for release or for the call's context; false means the router
// cancelled the call (recorded).
func (r *pdRecord) hold(ctx context.Context, release <-chan struct{}) bool {
	select {
	case <-release:
		return true
	case <-ctx.Done():
		r.mu.Lock()
		r.cancelled++
		r.mu.Unlock()
		return false
	}
}

func (r *pdRecord) done() {
	r.mu.Lock()
	r.returned++
	r.mu.Unlock()
}

type sglangScript func(ctx context.Context, req *sglang.GenerateRequest, send func(*sglang.GenerateResponse) error) error

// pdSGLang is a scripted SGLang engine for PD tests.
type pdSGLang struct {
	sglang.UnimplementedSglangSchedulerServer
	pdRecord
	script        sglangScript
	bootstrapPort int // reported in server_args when not 0

	reqs chan *sglang.GenerateRequest // every Generate request, buffered
}

func newPDSGLang(script sglangScript) *pdSGLang {
	return &pdSGLang{script: script, reqs: make(chan *sglang.GenerateRequest, 16)}
}

func (e *pdSGLang) Generate(req *sglang.GenerateRequest, out grpc.ServerStreamingServer[sglang.GenerateResponse]) error {
	defer e.done()
	e.reqs <- req
	return e.script(out.Context(), req, out.Send)
}

func (e *pdSGLang) Abort(_ context.Context, req *sglang.AbortRequest) (*sglang.AbortResponse, error) {
	e.mu.Lock()
	e.aborts = append(e.aborts, req.GetRequestId())
	e.mu.Unlock()
	return &sglang.AbortResponse{Success: true}, nil
}

func (e *pdSGLang) GetModelInfo(context.Context, *sglang.GetModelInfoRequest) (*sglang.GetModelInfoResponse, error) {
	return &sglang.GetModelInfoResponse{ModelPath: "test/pd"}, nil
}

func (e *pdSGLang) GetServerInfo(ctx context.Context, req *sglang.GetServerInfoRequest) (*sglang.GetServerInfoResponse, error) {
	if e.bootstrapPort == 0 {
		return e.UnimplementedSglangSchedulerServer.GetServerInfo(ctx, req)
	}
	args, _ := structpb.NewStruct(map[string]any{"disaggregation_bootstrap_port": float64(e.bootstrapPort)})
	return &sglang.GetServerInfoResponse{ServerArgs: args}, nil
}

// worker serves e and connects a worker with the given role to it.
func (e *pdSGLang) worker(t *testing.T, role workers.Role) *workers.Worker {
	t.Helper()
	addr := testutil.Serve(t, func(s *grpc.Server) { sglang.RegisterSglangSchedulerServer(s, e) })
	return connectPD(t, addr, workers.ProtocolSGLang, role)
}

type vllmScript func(ctx context.Context, req *vllm.GenerateRequest, send func(*vllm.GenerateResponse) error) error

// pdVLLM is a scripted vLLM engine for PD tests.
type pdVLLM struct {
	vllm.UnimplementedVllmEngineServer
	pdRecord
	script vllmScript
	reqs   chan *vllm.GenerateRequest
}

func newPDVLLM(script vllmScript) *pdVLLM {
	return &pdVLLM{script: script, reqs: make(chan *vllm.GenerateRequest, 16)}
}

func (e *pdVLLM) Generate(req *vllm.GenerateRequest, out grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
	defer e.done()
	e.reqs <- req
	return e.script(out.Context(), req, out.Send)
}

func (e *pdVLLM) Abort(_ context.Context, req *vllm.AbortRequest) (*vllm.AbortResponse, error) {
	e.mu.Lock()
	e.aborts = append(e.aborts, req.GetRequestIds()...)
	e.mu.Unlock()
	return &vllm.AbortResponse{}, nil
}

func (e *pdVLLM) GetModelInfo(context.Context, *vllm.GetModelInfoRequest) (*vllm.GetModelInfoResponse, error) {
	return &vllm.GetModelInfoResponse{ModelPath: "test/pd"}, nil
}

func (e *pdVLLM) worker(t *testing.T, role workers.Role) *workers.Worker {
	t.Helper()
	addr := testutil.Serve(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, e) })
	return connectPD(t, addr, workers.ProtocolVLLM, role)
}

func connectPD(t *testing.T, addr string, p workers.Protocol, role workers.Role) *workers.Worker {
	t.Helper()
	w, err := workers.Connect(testutil.Context(t, 5*time.Second), addr, workers.ConnectOptions{Protocol: p, Role: role})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// Messages.

func sgChunk(ids ...uint32) *sglang.GenerateResponse {
	return &sglang.GenerateResponse{Response: &sglang.GenerateResponse_Chunk{Chunk: &sglang.GenerateStreamChunk{
		TokenIds: ids, PromptTokens: 5, CompletionTokens: uint32(len(ids)),
	}}}
}

func sgComplete(prompt, cached uint32, out ...uint32) *sglang.GenerateResponse {
	return &sglang.GenerateResponse{Response: &sglang.GenerateResponse_Complete{Complete: &sglang.GenerateComplete{
		OutputIds: out, FinishReason: "length", PromptTokens: prompt, CachedTokens: cached, CompletionTokens: uint32(len(out)),
	}}}
}

func vlChunk(ids ...uint32) *vllm.GenerateResponse {
	return &vllm.GenerateResponse{Response: &vllm.GenerateResponse_Chunk{Chunk: &vllm.GenerateStreamChunk{
		TokenIds: ids, PromptTokens: 5, CompletionTokens: uint32(len(ids)),
	}}}
}

func vlComplete(prompt, cached uint32, kv *string, out ...uint32) *vllm.GenerateResponse {
	return &vllm.GenerateResponse{Response: &vllm.GenerateResponse_Complete{Complete: &vllm.GenerateComplete{
		OutputIds: out, FinishReason: "length", PromptTokens: prompt, CachedTokens: cached,
		CompletionTokens: uint32(len(out)), KvTransferParamsJson: kv,
	}}}
}

// Checks.

// readAll reads s to its end: the chunks' tokens, the completion, and the
// terminal error (nil for io.EOF after a completion).
func readAll(s workers.Stream) (tokens []uint32, fin *workers.Completion, err error) {
	for {
		c, err := s.Recv()
		if err != nil {
			if fin != nil && errors.Is(err, io.EOF) {
				return tokens, fin, nil
			}
			return tokens, fin, err
		}
		tokens = append(tokens, c.TokenIDs...)
		if c.Final != nil {
			fin = c.Final
		}
	}
}

// noPDGoroutines requires, at cleanup, that no goroutine of a disaggregated
// request (its coordinator, legs, or a leg's gRPC client stream) is left.
// Unlike testutil.NoLeaks it ignores the engines' own goroutines, such as
// the simulator's bootstrap HTTP connections.
func noPDGoroutines(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		testutil.EventuallyState(t, testutil.Patience, "the disaggregated request's goroutines to end", func() (bool, string) {
			buf := make([]byte, 1<<20)
			stacks := string(buf[:runtime.Stack(buf, true)])
			left := ""
			for _, g := range strings.Split(stacks, "\n\n") {
				if strings.Contains(g, "workers.(*pdStream)") || strings.Contains(g, "workers.runSGLang") ||
					strings.Contains(g, "workers.runVLLM") || strings.Contains(g, "grpc.newClientStreamWithParams") {
					left += g + "\n\n"
				}
			}
			return left == "", left
		})
	})
}

package workers_test

// Small scripted engines for adapter tests: real gRPC servers on loopback that
// record exactly what the adapters sent and answer what a test tells them to.
// Behaviour-level tests (load, cache, faults) belong with workers/sim; these
// exist to pin the wire translation byte for byte.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvgate/kvgate/internal/testutil"

	"google.golang.org/grpc"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
)

// healthScript decides a scripted engine's answer to its n-th (1-based)
// HealthCheck: healthy or not.
type healthScript func(n int64) bool

// sglangEngine is a scripted SGLang scheduler.
type sglangEngine struct {
	sglang.UnimplementedSglangSchedulerServer

	// Generate sends replies in order, then ends the call with endErr (nil
	// is an OK status).
	replies []*sglang.GenerateResponse
	endErr  error

	modelInfo  *sglang.GetModelInfoResponse
	serverInfo *sglang.GetServerInfoResponse // nil: GetServerInfo unimplemented
	loads      *sglang.GetLoadsResponse
	abortResp  *sglang.AbortResponse
	health     healthScript // nil: always healthy

	mu        sync.Mutex
	generates []*sglang.GenerateRequest
	aborts    []*sglang.AbortRequest
	loadReqs  []*sglang.GetLoadsRequest

	healthCalls atomic.Int64
	unhealthy   atomic.Int64 // unhealthy answers given
}

func (e *sglangEngine) Generate(req *sglang.GenerateRequest, out grpc.ServerStreamingServer[sglang.GenerateResponse]) error {
	e.mu.Lock()
	e.generates = append(e.generates, req)
	e.mu.Unlock()
	for _, r := range e.replies {
		if err := out.Send(r); err != nil {
			return err
		}
	}
	return e.endErr
}

func (e *sglangEngine) lastGenerate() *sglang.GenerateRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.generates) == 0 {
		return nil
	}
	return e.generates[len(e.generates)-1]
}

func (e *sglangEngine) HealthCheck(context.Context, *sglang.HealthCheckRequest) (*sglang.HealthCheckResponse, error) {
	n := e.healthCalls.Add(1)
	if e.health != nil && !e.health(n) {
		e.unhealthy.Add(1)
		return &sglang.HealthCheckResponse{Healthy: false, Message: "scheduler stalled"}, nil
	}
	return &sglang.HealthCheckResponse{Healthy: true}, nil
}

func (e *sglangEngine) Abort(_ context.Context, req *sglang.AbortRequest) (*sglang.AbortResponse, error) {
	e.mu.Lock()
	e.aborts = append(e.aborts, req)
	e.mu.Unlock()
	if e.abortResp != nil {
		return e.abortResp, nil
	}
	return &sglang.AbortResponse{Success: true}, nil
}

func (e *sglangEngine) GetModelInfo(context.Context, *sglang.GetModelInfoRequest) (*sglang.GetModelInfoResponse, error) {
	if e.modelInfo != nil {
		return e.modelInfo, nil
	}
	return &sglang.GetModelInfoResponse{ModelPath: "test/sglang-model"}, nil
}

func (e *sglangEngine) GetServerInfo(ctx context.Context, req *sglang.GetServerInfoRequest) (*sglang.GetServerInfoResponse, error) {
	if e.serverInfo == nil {
		return e.UnimplementedSglangSchedulerServer.GetServerInfo(ctx, req)
	}
	return e.serverInfo, nil
}

func (e *sglangEngine) GetLoads(_ context.Context, req *sglang.GetLoadsRequest) (*sglang.GetLoadsResponse, error) {
	e.mu.Lock()
	e.loadReqs = append(e.loadReqs, req)
	e.mu.Unlock()
	if e.loads != nil {
		return e.loads, nil
	}
	return &sglang.GetLoadsResponse{}, nil
}

// start serves e and returns its address.
func (e *sglangEngine) start(t *testing.T) string {
	return testutil.Serve(t, func(s *grpc.Server) { sglang.RegisterSglangSchedulerServer(s, e) })
}

// vllmEngine is a scripted vLLM engine.
type vllmEngine struct {
	vllm.UnimplementedVllmEngineServer

	replies []*vllm.GenerateResponse
	endErr  error

	modelInfo *vllm.GetModelInfoResponse
	loads     *vllm.GetLoadsResponse // nil: GetLoads unimplemented
	health    healthScript

	mu        sync.Mutex
	generates []*vllm.GenerateRequest
	aborts    []*vllm.AbortRequest

	healthCalls atomic.Int64
}

func (e *vllmEngine) Generate(req *vllm.GenerateRequest, out grpc.ServerStreamingServer[vllm.GenerateResponse]) error {
	e.mu.Lock()
	e.generates = append(e.generates, req)
	e.mu.Unlock()
	for _, r := range e.replies {
		if err := out.Send(r); err != nil {
			return err
		}
	}
	return e.endErr
}

func (e *vllmEngine) lastGenerate() *vllm.GenerateRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.generates) == 0 {
		return nil
	}
	return e.generates[len(e.generates)-1]
}

func (e *vllmEngine) HealthCheck(context.Context, *vllm.HealthCheckRequest) (*vllm.HealthCheckResponse, error) {
	n := e.healthCalls.Add(1)
	if e.health != nil && !e.health(n) {
		return &vllm.HealthCheckResponse{Healthy: false, Message: "engine dead"}, nil
	}
	return &vllm.HealthCheckResponse{Healthy: true}, nil
}

func (e *vllmEngine) Abort(_ context.Context, req *vllm.AbortRequest) (*vllm.AbortResponse, error) {
	e.mu.Lock()
	e.aborts = append(e.aborts, req)
	e.mu.Unlock()
	return &vllm.AbortResponse{}, nil
}

func (e *vllmEngine) GetModelInfo(context.Context, *vllm.GetModelInfoRequest) (*vllm.GetModelInfoResponse, error) {
	if e.modelInfo != nil {
		return e.modelInfo, nil
	}
	return &vllm.GetModelInfoResponse{ModelPath: "test/vllm-model"}, nil
}

func (e *vllmEngine) GetLoads(ctx context.Context, req *vllm.GetLoadsRequest) (*vllm.GetLoadsResponse, error) {
	if e.loads == nil {
		return e.UnimplementedVllmEngineServer.GetLoads(ctx, req)
	}
	return e.loads, nil
}

func (e *vllmEngine) start(t *testing.T) string {
	return testutil.Serve(t, func(s *grpc.Server) { vllm.RegisterVllmEngineServer(s, e) })
}

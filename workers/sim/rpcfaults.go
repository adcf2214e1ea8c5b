package sim

import (
	"context"
	"flag"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/vllm"
)

// RPCFaults make the engine implement parts of its protocol, as real engines
// do: an RPC answered UNIMPLEMENTED, a HealthCheck or an Embed answered with
// an empty message. A router must judge such an engine by what it can do
// and keep using it for the rest. They apply to engines served by Start.
type RPCFaults struct {
	// Unimplemented are engine RPCs (method names such as "GetLoads")
	// answered UNIMPLEMENTED before the engine sees them.
	Unimplemented RPCNames
	// Stalled are unary engine RPCs held unanswered until the caller gives
	// up (its deadline or cancellation): an engine that hangs on them.
	Stalled RPCNames
	// Delayed are unary engine RPCs answered Delay after they arrive (or
	// when the caller gives up, if that is sooner), as a loaded engine
	// whose Python server answers GetLoads late. It is a fault, not part of
	// the latency model: TimeScale does not scale Delay.
	Delayed RPCNames
	Delay   time.Duration
	// HealthEmpty makes HealthCheck answer an empty message: healthy
	// unset, which proto3 decodes as false, and no message.
	HealthEmpty bool
	// EmbedEmpty makes Embed answer an empty message: no vector and no
	// dimension.
	EmbedEmpty bool
}

// RPCNames is a comma-separated list of the engine protocols' method names.
// A string, so that Faults stays comparable.
type RPCNames string

// Has reports whether rpc ("GetLoads") is in the list.
func (n RPCNames) Has(rpc string) bool {
	return n != "" && slices.Contains(strings.Split(string(n), ","), rpc)
}

// String and Set make RPCNames a flag.Value.
func (n *RPCNames) String() string { return string(*n) }

// Set reads a list such as "GetLoads,GetTokenizer", refusing names neither
// protocol has.
func (n *RPCNames) Set(s string) error {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		if !slices.Contains(engineRPCs(), f) {
			return fmt.Errorf("%q is no RPC of the engine protocols (want some of %s)", f, strings.Join(engineRPCs(), ", "))
		}
		out = append(out, f)
	}
	*n = RPCNames(strings.Join(out, ","))
	return nil
}

// engineRPCs are the method names of both engine services.
func engineRPCs() []string {
	var out []string
	for _, d := range []grpc.ServiceDesc{sglang.SglangScheduler_ServiceDesc, vllm.VllmEngine_ServiceDesc} {
		for _, m := range d.Methods {
			out = append(out, m.MethodName)
		}
		for _, s := range d.Streams {
			out = append(out, s.StreamName)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// registerRPCFlags binds the partial-implementation switches to fs.
func (c *Config) registerRPCFlags(fs *flag.FlagSet) {
	fs.Var(&c.Faults.RPC.Unimplemented, "unimplemented", "fault: answer these engine RPCs UNIMPLEMENTED, comma-separated (e.g. GetLoads,GetTokenizer,SubscribeKvEvents,HealthCheck,Embed)")
	fs.Var(&c.Faults.RPC.Delayed, "delayed", "fault: answer these engine RPCs --rpc-delay late, comma-separated (e.g. GetLoads)")
	fs.DurationVar(&c.Faults.RPC.Delay, "rpc-delay", c.Faults.RPC.Delay, "fault: how late the --delayed RPCs answer, not scaled by --time-scale")
	fs.BoolVar(&c.Faults.RPC.HealthEmpty, "health-empty", c.Faults.RPC.HealthEmpty, "fault: HealthCheck answers an empty message (healthy unset)")
	fs.BoolVar(&c.Faults.RPC.EmbedEmpty, "embed-empty", c.Faults.RPC.EmbedEmpty, "fault: Embed answers an empty message (no embedding)")
	fs.Var((*OnOff)(&c.GRPCHealth), "grpc-health", `also serve the standard grpc.health.v1 Health service: "on" or "off"`)
}

// rpcFaultsUnary answers the RPCs listed in Faults.RPC.Unimplemented with
// UNIMPLEMENTED, holds those in Stalled and Delayed, and answers HealthCheck
// and Embed with empty messages under HealthEmpty and EmbedEmpty; it
// counts every call first (Engine.Calls).
func (e *Engine) rpcFaultsUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	rpc := path.Base(info.FullMethod)
	e.calls.add(rpc)
	f := e.Faults().RPC
	if f.Unimplemented.Has(rpc) {
		return nil, status.Errorf(codes.Unimplemented, "sim: injected fault: %s answers UNIMPLEMENTED", rpc)
	}
	if f.Stalled.Has(rpc) {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if f.Delayed.Has(rpc) && f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if rpc == "Embed" && f.EmbedEmpty {
		switch req.(type) {
		case *sglang.EmbedRequest:
			return &sglang.EmbedResponse{}, nil
		case *vllm.EmbedRequest:
			return &vllm.EmbedResponse{}, nil
		}
	}
	resp, err := h(ctx, req)
	if err == nil && rpc == "HealthCheck" && f.HealthEmpty {
		switch resp.(type) {
		case *sglang.HealthCheckResponse:
			return &sglang.HealthCheckResponse{}, nil
		case *vllm.HealthCheckResponse:
			return &vllm.HealthCheckResponse{}, nil
		}
	}
	return resp, err
}

// rpcFaultsStream is rpcFaultsUnary for streaming RPCs.
func (e *Engine) rpcFaultsStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	rpc := path.Base(info.FullMethod)
	e.calls.add(rpc)
	if e.Faults().RPC.Unimplemented.Has(rpc) {
		return status.Errorf(codes.Unimplemented, "sim: injected fault: %s answers UNIMPLEMENTED", rpc)
	}
	return h(srv, ss)
}

// Calls is how many calls of rpc (a method name: "GetLoads", or "Check"
// for grpc.health.v1) the engine received, answered or not.
func (e *Engine) Calls(rpc string) uint64 {
	c := &e.calls
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[rpc]
}

// WaitCalls returns once the engine has received n calls of rpc, or ctx's
// error when ctx ends first, so that tests wait for an engine's calls
// without polling.
func (e *Engine) WaitCalls(ctx context.Context, rpc string, n uint64) error {
	c := &e.calls
	for {
		c.mu.Lock()
		got := c.n[rpc]
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		ch := c.changed
		c.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("sim: %d of %d %s calls: %w", got, n, rpc, ctx.Err())
		}
	}
}

// rpcCalls counts the calls an engine received per method name.
type rpcCalls struct {
	mu      sync.Mutex
	n       map[string]uint64
	changed chan struct{} // closed and replaced at each call
}

func (c *rpcCalls) add(rpc string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]uint64{}
	}
	c.n[rpc]++
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}

// standardHealth serves grpc.health.v1: SERVING for the whole server and
// the engine's service, NOT_SERVING under the Unhealthy fault.
type standardHealth struct {
	healthpb.UnimplementedHealthServer
	e *Engine
}

func (h standardHealth) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	switch req.GetService() {
	case "", sglang.SglangScheduler_ServiceDesc.ServiceName, vllm.VllmEngine_ServiceDesc.ServiceName:
	default:
		return nil, status.Errorf(codes.NotFound, "sim: no service %q", req.GetService())
	}
	if h.e.Faults().Unhealthy {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// rpcFaultOptions are the server options and services Start adds for
// RPCFaults and Config.GRPCHealth.
func (e *Engine) rpcFaultOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(e.rpcFaultsUnary), grpc.ChainStreamInterceptor(e.rpcFaultsStream)}
}

// registerStandardHealth adds grpc.health.v1 to g when the config asks.
func (e *Engine) registerStandardHealth(g grpc.ServiceRegistrar) {
	if e.cfg.GRPCHealth {
		healthpb.RegisterHealthServer(g, standardHealth{e: e})
	}
}

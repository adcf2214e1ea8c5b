package bench

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
)

// front is the API a router serves its clients: kvgate's gRPC Router service
// or a peer's HTTP API. The bench drives every router through the front it
// has, with the same requests, and times what comes back the same way.
type front interface {
	// replicas is the number of router replicas the front reaches.
	replicas() int
	// generate streams the continuation of req through replica, calling
	// tokens each time output tokens arrive, and returns the usage the
	// router reported at the end.
	generate(ctx context.Context, replica int, req genRequest, tokens func()) (genResult, error)
	close()
}

// genRequest is one request of a workload: token ids in, a fixed number of
// tokens out (end-of-sequence ignored), sampled with seed so every router's
// run sees the same outputs (noSeed: none sent).
type genRequest struct {
	prompt []uint32
	maxNew uint32
	seed   int32
}

// genResult is what a router reported at the end of a request.
type genResult struct {
	prompt, cached, completion int
	// worker is the engine that served the request, when the front names it.
	worker    string
	outputIDs []uint32
}

// grpcFront is kvgate's Router service, one connection per replica.
type grpcFront struct {
	conns   []*grpc.ClientConn
	clients []kvgatev1.RouterClient
}

// dialRouters connects to kvgate routers at addrs.
func dialRouters(addrs []string) (*grpcFront, error) {
	f := &grpcFront{}
	for _, addr := range addrs {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
		if err != nil {
			f.close()
			return nil, fmt.Errorf("router %s: %w", addr, err)
		}
		f.conns = append(f.conns, conn)
		f.clients = append(f.clients, kvgatev1.NewRouterClient(conn))
	}
	return f, nil
}

func (f *grpcFront) replicas() int { return len(f.clients) }

func (f *grpcFront) close() {
	for _, c := range f.conns {
		_ = c.Close()
	}
}

func (f *grpcFront) generate(ctx context.Context, replica int, g genRequest, tokens func()) (genResult, error) {
	maxNew, seed := g.maxNew, g.seed
	req := &kvgatev1.GenerateRequest{
		InputIds: g.prompt,
		Stream:   true,
		SamplingParams: &kvgatev1.SamplingParams{
			MaxNewTokens: &maxNew,
			IgnoreEos:    true,
		},
	}
	if seed != noSeed {
		req.SamplingParams.Seed = &seed
	}
	// The loop leaves the stream at its completion, before io.EOF; ending
	// the context frees gRPC's state for the stream at once rather than at
	// the end of the run.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := f.clients[replica].Generate(ctx, req)
	if err != nil {
		return genResult{}, err
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return genResult{}, errors.New("stream ended without a completion")
		}
		if err != nil {
			return genResult{}, err
		}
		if c := resp.GetChunk(); c != nil {
			if len(c.GetTokenIds()) > 0 {
				tokens()
			}
			continue
		}
		if c := resp.GetComplete(); c != nil {
			u := c.GetUsage()
			return genResult{
				prompt:     int(u.GetPromptTokens()),
				cached:     int(u.GetCachedTokens()),
				completion: int(u.GetCompletionTokens()),
				worker:     c.GetWorker(),
				outputIDs:  c.GetOutputIds(),
			}, nil
		}
	}
}

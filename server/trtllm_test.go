package server_test

import (
	"context"
	"testing"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/workers/sim"
)

// TestAddWorkerNamesTRTLLM: Admin.AddWorker takes PROTOCOL_TRTLLM for a
// TensorRT-LLM engine, which then serves beside an SGLang one.
func TestAddWorkerNamesTRTLLM(t *testing.T) {
	f := startFleet(t, fleetOptions{workers: 1})
	start := func(protocol string) string {
		c := sim.DefaultConfig()
		c.Protocol, c.TimeScale = protocol, 0
		s, err := sim.Start(c, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		return s.Addr()
	}
	trt := start(sim.ProtocolTRTLLM)
	ctx := context.Background()

	add, err := f.admin.AddWorker(ctx, &kvgatev1.AddWorkerRequest{Address: trt, Protocol: kvgatev1.Protocol_PROTOCOL_TRTLLM})
	if err != nil || add.Worker.Protocol != kvgatev1.Protocol_PROTOCOL_TRTLLM || add.Worker.Health != kvgatev1.Health_HEALTH_HEALTHY {
		t.Fatalf("AddWorker trtllm: %v, %v", add, err)
	}
	resp, err := f.admin.ListWorkers(ctx, &kvgatev1.ListWorkersRequest{})
	if err != nil || len(resp.Workers) != 2 || resp.Workers[1].Protocol != kvgatev1.Protocol_PROTOCOL_TRTLLM {
		t.Errorf("ListWorkers after adding the trtllm worker: %v, %v", resp, err)
	}
	// The router serves through it: round robin over two workers.
	served := map[string]bool{}
	for i := range 4 {
		served[f.mustGenerate(t, &kvgatev1.GenerateRequest{InputIds: prompt(uint32(10*i), 8),
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(2), IgnoreEos: true}}).complete.Worker] = true
	}
	if !served["grpc://"+trt] {
		t.Errorf("the added trtllm worker served none of 4 requests (served: %v)", served)
	}
}

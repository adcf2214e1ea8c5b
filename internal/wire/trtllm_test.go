package wire_test

import (
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/kvgate/kvgate/api/gen/trtllm"
	"github.com/kvgate/kvgate/internal/wire"
)

// TestTRTLLMProtocolMatchesTheEngine holds kvgate's copy of TensorRT-LLM's
// protocol (api/proto/trtllm) to the engine's own definition, as published
// in smg-grpc-proto and recorded by scripts/wire-golden-trtllm.sh: the same
// service, methods, streaming, messages, enums, field numbers, names, types
// and cardinalities, so the same bytes on the wire.
func TestTRTLLMProtocolMatchesTheEngine(t *testing.T) {
	want, err := os.ReadFile("testdata/trtllm.golden")
	if err != nil {
		t.Fatal(err)
	}
	got := wire.Describe(protoregistry.GlobalFiles, "trtllm")
	wantSet := map[string]bool{}
	for _, l := range strings.Split(string(want), "\n") {
		wantSet[l] = true
	}
	gotSet := map[string]bool{}
	for _, l := range strings.Split(got, "\n") {
		gotSet[l] = true
		if !wantSet[l] {
			t.Errorf("ours only:   %s", l)
		}
	}
	for l := range wantSet {
		if !gotSet[l] {
			t.Errorf("engine only: %s", l)
		}
	}
}

// TestTRTLLMGoldenHoldsTheFieldsTheAdapterUses guards the golden itself:
// the facts the adapter depends on are in it, as TensorRT-LLM numbers them.
func TestTRTLLMGoldenHoldsTheFieldsTheAdapterUses(t *testing.T) {
	want, err := os.ReadFile("testdata/trtllm.golden")
	if err != nil {
		t.Fatal(err)
	}
	for _, fact := range []string{
		"rpc /trtllm.TrtllmService/Generate (trtllm.GenerateRequest) returns (stream trtllm.GenerateResponse)",
		"rpc /trtllm.TrtllmService/SubscribeKvEvents (smg.grpc.common.SubscribeKvEventsRequest) returns (stream smg.grpc.common.KvEventBatch)",
		"field trtllm.GenerateRequest.5 max_tokens singular uint32",
		"field trtllm.GenerateRequest.26 include_stop_token_in_output singular bool",
		"field trtllm.GenerateComplete.13 matched_token_id presence uint32 oneof matched_stop",
		"field trtllm.SamplingConfig.8 seed presence uint64",
		"field trtllm.HealthCheckResponse.1 status singular string",
	} {
		if !strings.Contains(string(want), fact+"\n") {
			t.Errorf("golden lacks %q", fact)
		}
	}
}

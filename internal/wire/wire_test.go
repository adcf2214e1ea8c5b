package wire_test

import (
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/kvgate/kvgate/api/gen/sglang"
	_ "github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/internal/wire"
)

// TestEngineProtocolsMatchTheEngines holds kvgate's copies of the SGLang and
// vLLM protocols (api/proto) to the engines' own definitions, recorded by
// scripts/wire-golden.sh: same services, methods, streaming, messages, field
// numbers, names, types and cardinalities.
func TestEngineProtocolsMatchTheEngines(t *testing.T) {
	want, err := os.ReadFile("testdata/engines.golden")
	if err != nil {
		t.Fatal(err)
	}
	got := wire.Describe(protoregistry.GlobalFiles, wire.EnginePackages...)
	if got == string(want) {
		return
	}
	wantSet := map[string]bool{}
	for _, l := range strings.Split(string(want), "\n") {
		wantSet[l] = true
	}
	gotSet := map[string]bool{}
	for _, l := range strings.Split(got, "\n") {
		gotSet[l] = true
		if !wantSet[l] {
			t.Errorf("ours only:    %s", l)
		}
	}
	for l := range wantSet {
		if !gotSet[l] {
			t.Errorf("engines only: %s", l)
		}
	}
}

// TestDescribeSeesDifferences guards the guard: a description must change when
// a field number does.
func TestDescribeSeesDifferences(t *testing.T) {
	d := wire.Describe(protoregistry.GlobalFiles, "vllm.grpc.engine")
	for _, fact := range []string{
		"field vllm.grpc.engine.SamplingParams.24 seed presence int32",
		"rpc /vllm.grpc.engine.VllmEngine/Generate (vllm.grpc.engine.GenerateRequest) returns (stream vllm.grpc.engine.GenerateResponse)",
		"field vllm.grpc.engine.GenerateRequest.2 tokenized presence vllm.grpc.engine.TokenizedInput oneof input",
	} {
		if !strings.Contains(d, fact+"\n") {
			t.Errorf("description lacks %q", fact)
		}
	}
	if strings.Contains(d, "sglang.grpc.scheduler") {
		t.Error("description of vllm.grpc.engine includes another package")
	}
}

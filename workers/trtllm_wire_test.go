package workers_test

// TensorRT-LLM's GenerateRequest as the adapter puts it on the wire, read
// with protowire from the bytes a loopback server captured (see
// wire_logprobs_test.go for why not with our generated code). The field
// numbers are those of trtllm_service.proto in the PyPI package
// smg-grpc-proto 0.4.28 (internal/wire/testdata/trtllm.golden records the
// whole definition): GenerateRequest request_id 1, tokenized 2,
// sampling_config 3, output_config 4, max_tokens 5, streaming 6,
// guided_decoding 11, stop_token_ids 22, ignore_eos 23,
// include_stop_token_in_output 26; TokenizedInput input_token_ids 2;
// SamplingConfig beam_width 1, num_return_sequences 2, top_k 3, seed 8,
// temperature 9, min_tokens 10; OutputConfig logprobs 1, prompt_logprobs 2,
// exclude_input_from_output 5; GuidedDecodingParams guide_type 1, guide 2
// (GUIDE_TYPE_JSON_SCHEMA 2, REGEX 3, EBNF_GRAMMAR 4, STRUCTURAL_TAG 5).

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
)

// packedVarints reads a packed repeated varint field.
func packedVarints(t *testing.T, b []byte) []uint64 {
	t.Helper()
	var out []uint64
	for len(b) > 0 {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			t.Fatalf("bad packed varint: %v", protowire.ParseError(n))
		}
		out = append(out, v)
		b = b[n:]
	}
	return out
}

// sub parses the message in field num of fs, failing the test when it is
// absent.
func sub(t *testing.T, fs []wireField, num protowire.Number, name string) []wireField {
	t.Helper()
	f, ok := field(fs, num)
	if !ok {
		t.Fatalf("no %s (field %d)", name, num)
	}
	return wireFields(t, f.bytes)
}

func TestTRTLLMWireGenerateRequest(t *testing.T) {
	tests := []struct {
		name string
		req  workers.GenerateRequest

		top, sampling, output, guided map[protowire.Number]int64
		topAbsent, samplingAbsent     []protowire.Number
		outputAbsent                  []protowire.Number
		samplingPresent               []protowire.Number // floats, present whatever their value
		guide                         string             // guided_decoding.guide; "" for no guided_decoding
		stopIDs                       []uint64
	}{
		{
			name: "defaults: one beam, engine's sampling defaults, context-sized max_tokens unknown",
			req:  workers.GenerateRequest{RequestID: "w1", InputIDs: []uint32{7, 8, 9}},
			top:  map[protowire.Number]int64{5: 4096, 6: 1, 26: 1},
			// top_k, seed, temperature, min_tokens unset: the engine's defaults.
			sampling: map[protowire.Number]int64{1: 1, 2: 1}, samplingAbsent: []protowire.Number{3, 8, 9, 10},
			output: map[protowire.Number]int64{5: 1}, outputAbsent: []protowire.Number{1, 2},
			topAbsent: []protowire.Number{11, 22, 23},
		},
		{
			name: "sampling, stop ids, no stream",
			req: workers.GenerateRequest{RequestID: "w2", InputIDs: []uint32{1}, NoStream: true, Sampling: workers.Sampling{
				MaxNewTokens: ptr[uint32](7), MinNewTokens: 2, TopK: ptr[int32](-1), Seed: ptr[int32](3),
				Temperature: ptr[float32](0), StopTokenIDs: []uint32{5, 300}, IgnoreEOS: true}},
			top:             map[protowire.Number]int64{5: 7, 23: 1, 26: 1},
			sampling:        map[protowire.Number]int64{3: 0, 8: 3, 10: 2}, // top_k -1 is "disabled", 0 here
			samplingPresent: []protowire.Number{9},                         // temperature 0: greedy, so on the wire
			// streaming false is proto3's absent.
			topAbsent: []protowire.Number{6, 11}, stopIDs: []uint64{5, 300},
		},
		{
			name: "logprobs with alternatives",
			req: workers.GenerateRequest{RequestID: "w3", InputIDs: []uint32{1, 2},
				Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](1)}, Logprobs: &workers.LogprobRequest{Output: true, Prompt: true, TopK: 4}},
			output: map[protowire.Number]int64{1: 4, 2: 4, 5: 1},
		},
		{
			name: "output logprobs without alternatives: present even when 0",
			req: workers.GenerateRequest{RequestID: "w4", InputIDs: []uint32{1, 2},
				Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](1)}, Logprobs: &workers.LogprobRequest{Output: true}},
			output: map[protowire.Number]int64{1: 0}, outputAbsent: []protowire.Number{2},
		},
		{
			name: "json schema",
			req: workers.GenerateRequest{RequestID: "w5", InputIDs: []uint32{1}, Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](1),
				Constraint: workers.Constraint{Kind: workers.JSONSchema, Value: `{"type":"object"}`}}},
			guided: map[protowire.Number]int64{1: 2}, guide: `{"type":"object"}`,
		},
		{
			name: "regex",
			req: workers.GenerateRequest{RequestID: "w6", InputIDs: []uint32{1}, Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](1),
				Constraint: workers.Constraint{Kind: workers.Regex, Value: `[a-z]+`}}},
			guided: map[protowire.Number]int64{1: 3}, guide: `[a-z]+`,
		},
		{
			name: "ebnf",
			req: workers.GenerateRequest{RequestID: "w7", InputIDs: []uint32{1}, Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](1),
				Constraint: workers.Constraint{Kind: workers.EBNF, Value: `root ::= "a"`}}},
			guided: map[protowire.Number]int64{1: 4}, guide: `root ::= "a"`,
		},
		{
			name: "structural tag",
			req: workers.GenerateRequest{RequestID: "w8", InputIDs: []uint32{1}, Sampling: workers.Sampling{MaxNewTokens: ptr[uint32](1),
				Constraint: workers.Constraint{Kind: workers.StructuralTag, Value: `{"type":"structural_tag"}`}}},
			guided: map[protowire.Number]int64{1: 5}, guide: `{"type":"structural_tag"}`,
		},
	}
	addr, got := captureGenerate(t)
	b := workers.NewTRTLLMBackend(testutil.Dial(t, addr))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(testutil.Context(t, 5*time.Second))
			defer cancel()
			st, err := b.Generate(ctx, &tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); status.Code(err) != codes.Unimplemented {
				t.Fatalf("Recv: %v, want the capture server's UNIMPLEMENTED", err)
			}
			top := wireFields(t, <-got)
			if f, ok := field(top, 1); !ok || string(f.bytes) != tc.req.RequestID {
				t.Errorf("request_id (1) = %q, want %q", f.bytes, tc.req.RequestID)
			}
			tok := sub(t, top, 2, "tokenized")
			if f, ok := field(tok, 2); !ok || !slices.Equal(packedVarints(t, f.bytes), toU64(tc.req.InputIDs)) {
				t.Errorf("tokenized.input_token_ids (2) = %v, want %v", packedVarints(t, f.bytes), tc.req.InputIDs)
			}
			checkVarints(t, "request", top, tc.top, tc.topAbsent)
			sc := sub(t, top, 3, "sampling_config")
			checkVarints(t, "sampling_config", sc, tc.sampling, tc.samplingAbsent)
			for _, num := range tc.samplingPresent {
				if _, ok := field(sc, num); !ok {
					t.Errorf("sampling_config field %d is absent", num)
				}
			}
			checkVarints(t, "output_config", sub(t, top, 4, "output_config"), tc.output, tc.outputAbsent)
			if tc.stopIDs != nil {
				f, _ := field(top, 22)
				if got := packedVarints(t, f.bytes); !slices.Equal(got, tc.stopIDs) {
					t.Errorf("stop_token_ids (22) = %v, want %v", got, tc.stopIDs)
				}
			}
			if tc.guide != "" {
				g := sub(t, top, 11, "guided_decoding")
				checkVarints(t, "guided_decoding", g, tc.guided, nil)
				if f, ok := field(g, 2); !ok || string(f.bytes) != tc.guide {
					t.Errorf("guided_decoding.guide (2) = %q, want %q", f.bytes, tc.guide)
				}
			}
		})
	}
}

func toU64(ids []uint32) []uint64 {
	out := make([]uint64, len(ids))
	for i, id := range ids {
		out[i] = uint64(id)
	}
	return out
}

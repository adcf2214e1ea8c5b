package server_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/workers/sim"
)

// clientCodes are the answers a request may get from a router whose
// engines are healthy: the client's mistake, a limit, or something the
// router does not do. INTERNAL, UNKNOWN, UNAVAILABLE, DEADLINE_EXCEEDED
// and the rest would be the router failing, or a client's mistake it took
// for its own.
var clientCodes = map[codes.Code]bool{
	codes.InvalidArgument: true, codes.FailedPrecondition: true, codes.OutOfRange: true,
	codes.NotFound: true, codes.ResourceExhausted: true, codes.Unimplemented: true,
}

// routerHeaders are the metadata keys the router reads of a request,
// which FuzzRouterRequest sets one of.
var routerHeaders = []string{"x-request-id", "traceparent", "tracestate", "x-target-worker", "x-routing-key",
	"kvgate-priority", "x-smg-target-worker", "x-smg-routing-key", "authorization", "x-forwarded-for"}

// printableASCII reports whether v is a metadata value a gRPC client sends
// (printable ASCII; grpc-go refuses others before they leave).
func printableASCII(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

// FuzzRouterRequest sends any Generate, Chat, Embed or Explain message a
// client can encode through the whole router (admission, chat template,
// tokenizer, constraints, cache_aware, an engine protocol's adapter) to
// two healthy simulated engines of SGLang's, vLLM's or TensorRT-LLM's
// protocol, with one of the request headers the router reads
// (routerHeaders) set to any value. A call either ends OK with its whole
// answer (see fuzzCall), or with one of clientCodes; it never fails as the
// router's own error or hangs. The request checks' own fuzz targets
// (FuzzValidateRequest, FuzzRequestCodec, FuzzStructuredSampling,
// FuzzEmbedRequest) hold each check to its contract; this one holds the
// path they guard.
//
//	go test -run '^$' -fuzz FuzzRouterRequest -fuzztime 5m ./server/
func FuzzRouterRequest(f *testing.F) {
	var fleets []*fleet
	for _, p := range []string{"sglang", "vllm", "trtllm"} {
		fleets = append(fleets, startFleet(f, fleetOptions{protocol: p, policy: "cache_aware", text: true, sim: func(_ int, c *sim.Config) {
			c.MaxContextLength = 4096 // bounds what a request may ask to generate
		}}))
	}
	kwargs, _ := structpb.NewStruct(map[string]any{"enable_thinking": false})
	params, _ := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}})
	args, _ := structpb.NewValue(map[string]any{"city": "Paris"})
	seeds := []proto.Message{
		&kvgatev1.GenerateRequest{InputIds: []uint32{1, 2, 3}, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(4)}},
		&kvgatev1.GenerateRequest{Text: "hello there", Stream: true, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(3),
			Temperature: f32(0.7), TopK: i32(5), Stop: []string{"\n"}, Logprobs: true, TopLogprobs: 2, PromptLogprobs: true}},
		&kvgatev1.GenerateRequest{Text: "a date", SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(12),
			Constraint: &kvgatev1.SamplingParams_Regex{Regex: `\d{4}-\d{2}-\d{2}`}}},
		&kvgatev1.GenerateRequest{InputIds: []uint32{5, 6}, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(4096)}},
		&kvgatev1.GenerateRequest{RequestId: "r1", Model: "no-such-model", InputIds: []uint32{1}},
		&kvgatev1.ChatRequest{Messages: []*kvgatev1.ChatMessage{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}},
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(4)}, ChatTemplateKwargs: kwargs},
		&kvgatev1.ChatRequest{Stream: true, Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "weather?"},
			{Role: "assistant", ToolCalls: []*kvgatev1.ToolCall{{Id: "c1", Type: "function", Function: &kvgatev1.FunctionCall{Name: "get_weather", Arguments: args}}}},
			{Role: "tool", ToolCallId: "c1", Content: "sunny"}},
			Tools:      []*kvgatev1.Tool{{Type: "function", Function: &kvgatev1.FunctionDefinition{Name: "get_weather", Parameters: params}}},
			ToolChoice: &kvgatev1.ToolChoice{Mode: "auto"}, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(6)}},
		&kvgatev1.ChatRequest{Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "json"}},
			ResponseFormat: &kvgatev1.ResponseFormat{Type: "json_object"}, SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: u32(8)}},
		&kvgatev1.ChatRequest{Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "x"}}, ReasoningParser: proto.String("qwen3"), ToolCallParser: proto.String("nope")},
		&kvgatev1.EmbedRequest{Inputs: []*kvgatev1.EmbedInput{{InputIds: []uint32{1, 2, 3}}, {Text: "a sentence"}}},
		&kvgatev1.EmbedRequest{Inputs: []*kvgatev1.EmbedInput{{InputIds: []uint32{1}, Text: "both"}, {}}},
		&kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Generate{Generate: &kvgatev1.GenerateRequest{InputIds: []uint32{1, 2, 3}}},
			Metadata: map[string]string{"x-routing-key": "session-7"}},
		&kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Chat{Chat: &kvgatev1.ChatRequest{Messages: []*kvgatev1.ChatMessage{{Role: "user", Content: "hi"}}}},
			Metadata: map[string]string{"x-target-worker": "9"}},
	}
	for _, m := range seeds {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		var kind uint8
		switch m.(type) {
		case *kvgatev1.ChatRequest:
			kind = 1
		case *kvgatev1.EmbedRequest:
			kind = 2
		case *kvgatev1.ExplainRequest:
			kind = 3
		}
		for p := range fleets {
			f.Add(uint8(p), kind, b, uint8(p), "")
		}
	}
	b, _ := proto.Marshal(seeds[0])
	for i, v := range []string{"req-7", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=x", "1", "user-42",
		"-5", "0", "user-42", "Bearer sk-x", "10.0.0.1"} {
		f.Add(uint8(0), uint8(0), b, uint8(i), v)
	}
	f.Fuzz(func(t *testing.T, protocol, kind uint8, data []byte, header uint8, value string) {
		which := int(protocol) % len(fleets)
		fl := fleets[which]
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		key := routerHeaders[int(header)%len(routerHeaders)]
		if !printableASCII(value) {
			return // not a value gRPC sends in metadata
		}
		ctx = metadata.AppendToOutgoingContext(ctx, key, value)
		rpc, err := fuzzCall(ctx, t, fl, kind, data)
		if rpc == "" {
			return // refused by the codec (FuzzRequestCodec)
		}
		if err != nil && !errors.Is(err, errMalformed) {
			if st := status.Convert(err); clientCodes[st.Code()] && st.Message() != "" {
				return
			}
		}
		if err != nil {
			t.Fatalf("fleet %d, %s %x, %s: %q: %v; want OK or a client's error (%v) with a message", which, rpc, data, key, value, err, clientCodes)
		}
	})
}

// fuzzCall makes the call kind names (Generate, Chat, Embed, Explain) with
// the message data holds, and returns its name ("" when data is not such a
// message) and its error; a call that ended OK without its answer is an
// error too.
func fuzzCall(ctx context.Context, t *testing.T, fl *fleet, kind uint8, data []byte) (string, error) {
	switch kind % 4 {
	case 0:
		req := &kvgatev1.GenerateRequest{}
		if proto.Unmarshal(data, req) != nil {
			return "", nil
		}
		r, err := fl.readGenerate(ctx, req)
		if err == nil && r.complete == nil {
			err = errors.New("the stream ended OK without a completion")
		}
		return "Generate", err
	case 1:
		req := &kvgatev1.ChatRequest{}
		if proto.Unmarshal(data, req) != nil {
			return "", nil
		}
		r, err := fl.chat(ctx, t, req)
		if err == nil && r.complete == nil {
			err = errors.New("the stream ended OK without a completion")
		}
		return "Chat", err
	case 2:
		req := &kvgatev1.EmbedRequest{}
		if proto.Unmarshal(data, req) != nil {
			return "", nil
		}
		resp, err := fl.router.Embed(ctx, req)
		if err == nil && len(resp.GetEmbeddings()) != len(req.GetInputs()) {
			err = fmt.Errorf("%d embeddings for %d inputs", len(resp.GetEmbeddings()), len(req.GetInputs()))
		}
		return "Embed", err
	default:
		req := &kvgatev1.ExplainRequest{}
		if proto.Unmarshal(data, req) != nil {
			return "", nil
		}
		resp, err := fl.admin.Explain(ctx, req)
		if err == nil && resp.GetWorker() == "" {
			err = errors.New("an explanation that names no worker")
		}
		return "Explain", err
	}
}

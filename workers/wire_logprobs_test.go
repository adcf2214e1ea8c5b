package workers_test

// Structured-output constraints and log-probability requests as they arrive
// on the wire, read with protowire from the raw request bytes a loopback
// server captured, not with our generated code: a field number wrong in our
// copy of a proto would pass any test that decodes with that same copy.
//
// The field numbers asserted here were checked against the engines'
// upstream protocol definitions, smg-project/smg
// crates/grpc_client/proto/sglang_scheduler.proto (commit 84258829eded):
// SamplingParams oneof constraint regex 13, json_schema 14, ebnf_grammar
// 15, structural_tag 16; GenerateRequest sampling_params 4, return_logprob
// 5, logprob_start_len 6, top_logprobs_num 7; and
// crates/grpc_client/proto/vllm_engine.proto (commit 02d79f7f140c):
// SamplingParams json_schema 16, regex 17, grammar 18, structural_tag 19,
// json_object 20, logprobs 22, prompt_logprobs 23; GenerateRequest
// sampling_params 4.

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
)

// rawCodec hands the server the request's bytes as they came.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// captureGenerate serves any method with a handler that records the first
// request message's bytes and fails the call, and returns its address and
// the channel the bytes arrive on.
func captureGenerate(t *testing.T) (string, <-chan []byte) {
	t.Helper()
	got := make(chan []byte, 16)
	handler := func(_ any, stream grpc.ServerStream) error {
		var b []byte
		if err := stream.RecvMsg(&b); err != nil {
			return err
		}
		got <- b
		return status.Error(codes.Unimplemented, "capture only")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.UnknownServiceHandler(handler), grpc.ForceServerCodec(rawCodec{}))
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String(), got
}

// wireField is one field of a message as protowire reads it.
type wireField struct {
	num    protowire.Number
	varint uint64
	bytes  []byte
}

// wireFields parses one message level, failing the test on bad bytes.
func wireFields(t *testing.T, b []byte) []wireField {
	t.Helper()
	var out []wireField
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		f := wireField{num: num}
		switch typ {
		case protowire.VarintType:
			f.varint, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			f.bytes, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			t.Fatalf("bad field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
		out = append(out, f)
	}
	return out
}

// field returns the last occurrence of num (proto3's rule for scalars).
func field(fs []wireField, num protowire.Number) (wireField, bool) {
	var f wireField
	ok := false
	for _, x := range fs {
		if x.num == num {
			f, ok = x, true
		}
	}
	return f, ok
}

// wireCase is one request and what its bytes must hold: in GenerateRequest
// (top) and in its sampling_params (field 4) a string field, and varint
// fields by number (absent ones listed in absent).
type wireCase struct {
	name       string
	constraint workers.Constraint
	logprobs   *workers.LogprobRequest

	samplingString map[protowire.Number]string
	topVarint      map[protowire.Number]int64
	samplingVarint map[protowire.Number]int64
	topAbsent      []protowire.Number
	samplingAbsent []protowire.Number
}

func TestWireConstraintsAndLogprobs(t *testing.T) {
	const schema = `{"type":"object","required":["a"],"properties":{"a":{"type":"integer"}}}`
	const regex = `[a-z]+`
	const ebnf = `root ::= "yes" | "no"`
	const tag = `{"type":"structural_tag","structures":[],"triggers":[]}`
	protocols := []struct {
		name  string
		proto workers.Protocol
		cases []wireCase
	}{
		{"sglang", workers.ProtocolSGLang, []wireCase{
			{name: "json_schema", constraint: workers.Constraint{Kind: workers.JSONSchema, Value: schema},
				samplingString: map[protowire.Number]string{14: schema}, samplingAbsent: []protowire.Number{13, 15, 16}, topAbsent: []protowire.Number{5, 6, 7}},
			{name: "regex", constraint: workers.Constraint{Kind: workers.Regex, Value: regex},
				samplingString: map[protowire.Number]string{13: regex}, samplingAbsent: []protowire.Number{14, 15, 16}},
			{name: "ebnf", constraint: workers.Constraint{Kind: workers.EBNF, Value: ebnf},
				samplingString: map[protowire.Number]string{15: ebnf}, samplingAbsent: []protowire.Number{13, 14, 16}},
			{name: "structural_tag", constraint: workers.Constraint{Kind: workers.StructuralTag, Value: tag},
				samplingString: map[protowire.Number]string{16: tag}, samplingAbsent: []protowire.Number{13, 14, 15}},
			{name: "output logprobs", logprobs: &workers.LogprobRequest{Output: true, TopK: 5},
				topVarint: map[protowire.Number]int64{5: 1, 6: -1, 7: 5}, samplingAbsent: []protowire.Number{13, 14, 15, 16}},
			{name: "prompt logprobs", logprobs: &workers.LogprobRequest{Prompt: true, TopK: 2},
				topVarint: map[protowire.Number]int64{5: 1, 7: 2}, topAbsent: []protowire.Number{6}}, // logprob_start_len 0: proto3 omits it
			{name: "both, no alternatives", logprobs: &workers.LogprobRequest{Output: true, Prompt: true},
				topVarint: map[protowire.Number]int64{5: 1}, topAbsent: []protowire.Number{6, 7}},
			{name: "nothing asked", logprobs: &workers.LogprobRequest{TopK: 3},
				topAbsent: []protowire.Number{5, 6, 7}},
		}},
		{"vllm", workers.ProtocolVLLM, []wireCase{
			{name: "json_schema", constraint: workers.Constraint{Kind: workers.JSONSchema, Value: schema},
				samplingString: map[protowire.Number]string{16: schema}, samplingAbsent: []protowire.Number{17, 18, 19, 20, 22, 23}},
			{name: "regex", constraint: workers.Constraint{Kind: workers.Regex, Value: regex},
				samplingString: map[protowire.Number]string{17: regex}, samplingAbsent: []protowire.Number{16, 18, 19, 20}},
			{name: "grammar", constraint: workers.Constraint{Kind: workers.EBNF, Value: ebnf},
				samplingString: map[protowire.Number]string{18: ebnf}, samplingAbsent: []protowire.Number{16, 17, 19, 20}},
			{name: "structural_tag", constraint: workers.Constraint{Kind: workers.StructuralTag, Value: tag},
				samplingString: map[protowire.Number]string{19: tag}, samplingAbsent: []protowire.Number{16, 17, 18, 20}},
			{name: "output logprobs", logprobs: &workers.LogprobRequest{Output: true, TopK: 5},
				samplingVarint: map[protowire.Number]int64{22: 5}, samplingAbsent: []protowire.Number{23}},
			{name: "prompt logprobs", logprobs: &workers.LogprobRequest{Prompt: true, TopK: 2},
				samplingVarint: map[protowire.Number]int64{23: 2}, samplingAbsent: []protowire.Number{22}},
			{name: "both, no alternatives", logprobs: &workers.LogprobRequest{Output: true, Prompt: true},
				samplingVarint: map[protowire.Number]int64{22: 0, 23: 0}}, // optional: present even when 0
			{name: "nothing asked", logprobs: &workers.LogprobRequest{TopK: 3},
				samplingAbsent: []protowire.Number{22, 23}},
		}},
	}
	for _, p := range protocols {
		addr, got := captureGenerate(t)
		conn := testutil.Dial(t, addr)
		var b workers.Backend
		if p.proto == workers.ProtocolSGLang {
			b = workers.NewSGLangBackend(conn)
		} else {
			b = workers.NewVLLMBackend(conn)
		}
		for _, tc := range p.cases {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				ctx, cancel := context.WithCancel(testutil.Context(t, 5*time.Second))
				defer cancel()
				st, err := b.Generate(ctx, &workers.GenerateRequest{
					RequestID: "wire", InputIDs: []uint32{1, 2, 3},
					Sampling: workers.Sampling{Constraint: tc.constraint}, Logprobs: tc.logprobs,
				})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := st.Recv(); status.Code(err) != codes.Unimplemented {
					t.Fatalf("Recv: %v, want the capture server's UNIMPLEMENTED", err)
				}
				top := wireFields(t, <-got)
				spf, ok := field(top, 4)
				if !ok {
					t.Fatal("no sampling_params (field 4)")
				}
				sp := wireFields(t, spf.bytes)
				for num, want := range tc.samplingString {
					f, ok := field(sp, num)
					if !ok || string(f.bytes) != want {
						t.Errorf("sampling_params field %d = %q (present %v), want %q", num, f.bytes, ok, want)
					}
				}
				checkVarints(t, "request", top, tc.topVarint, tc.topAbsent)
				checkVarints(t, "sampling_params", sp, tc.samplingVarint, tc.samplingAbsent)
			})
		}
	}
}

// checkVarints asserts varint fields as int32 values (how both protos
// declare them: negative int32s travel sign-extended to 64 bits), and that
// the absent ones are not on the wire.
func checkVarints(t *testing.T, where string, fs []wireField, want map[protowire.Number]int64, absent []protowire.Number) {
	t.Helper()
	for num, v := range want {
		f, ok := field(fs, num)
		if !ok || int64(int32(f.varint)) != v {
			t.Errorf("%s field %d = %d (present %v), want %d", where, num, int32(f.varint), ok, v)
		}
	}
	for _, num := range absent {
		if f, ok := field(fs, num); ok {
			t.Errorf("%s field %d is on the wire (%d, %q), want absent", where, num, f.varint, f.bytes)
		}
	}
}

func TestUnknownConstraintKindRefused(t *testing.T) {
	for _, p := range []workers.Protocol{workers.ProtocolSGLang, workers.ProtocolVLLM} {
		addr, got := captureGenerate(t)
		conn := testutil.Dial(t, addr)
		b := workers.NewSGLangBackend(conn)
		if p == workers.ProtocolVLLM {
			b = workers.NewVLLMBackend(conn)
		}
		_, err := b.Generate(testutil.Context(t, 5*time.Second), &workers.GenerateRequest{RequestID: "x", InputIDs: []uint32{1},
			Sampling: workers.Sampling{Constraint: workers.Constraint{Kind: 99, Value: "?"}}})
		if !testutil.IsFault(err, fault.Invalid) {
			t.Errorf("%v: Generate with kind 99: %v, want INVALID_ARGUMENT", p, err)
		}
		select {
		case <-got:
			t.Errorf("%v: the request reached the engine", p)
		default:
		}
	}
}

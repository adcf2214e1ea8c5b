package workers

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/trtllm"
	"github.com/kvgate/kvgate/api/gen/vllm"
	"github.com/kvgate/kvgate/internal/pbwire"
)

// TestPromptCodec holds each adapter's request, built as Generate builds it
// (the ids left out) and marshalled by the prompt codec, to the bytes
// protobuf gives the request with its ids; and a message of another type
// to protobuf's own.
func TestPromptCodec(t *testing.T) {
	ids := []uint32{128000, 9906, 11, 1917, 0, 5, 300, 1 << 30}
	tests := []struct {
		name          string
		field         promptField
		without, with proto.Message
	}{
		{"sglang", NewSGLangBackend(nil).(*sglangBackend).prompt,
			&sglang.GenerateRequest{RequestId: "r", Tokenized: &sglang.TokenizedInput{}, Stream: true},
			&sglang.GenerateRequest{RequestId: "r", Tokenized: &sglang.TokenizedInput{InputIds: ids}, Stream: true}},
		{"vllm", NewVLLMBackend(nil).(*vllmBackend).prompt,
			&vllm.GenerateRequest{RequestId: "r", Input: &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{}}, Stream: true},
			&vllm.GenerateRequest{RequestId: "r", Input: &vllm.GenerateRequest_Tokenized{Tokenized: &vllm.TokenizedInput{InputIds: ids}}, Stream: true}},
		{"trtllm", NewTRTLLMBackend(nil).(*trtllmBackend).prompt,
			&trtllm.GenerateRequest{RequestId: "r", Tokenized: &trtllm.TokenizedInput{QueryTokenIds: []uint32{7}}, Streaming: true},
			&trtllm.GenerateRequest{RequestId: "r", Tokenized: &trtllm.TokenizedInput{InputTokenIds: ids, QueryTokenIds: []uint32{7}}, Streaming: true}},
		{"another message: protobuf's bytes", NewSGLangBackend(nil).(*sglangBackend).prompt,
			&sglang.AbortRequest{RequestId: "r"}, &sglang.AbortRequest{RequestId: "r"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := promptCodec{newKVWireCodec().CodecV2, tt.field, pbwire.NewRun(ids)}
			got, err := c.Marshal(tt.without)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Free()
			want, err := proto.Marshal(tt.with)
			if err != nil {
				t.Fatal(err)
			}
			if b := got.Materialize(); !bytes.Equal(b, want) {
				t.Errorf("the codec wrote %x, protobuf %x", b, want)
			}
		})
	}
}

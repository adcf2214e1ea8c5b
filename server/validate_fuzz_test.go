package server

import (
	"context"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
)

// FuzzValidateRequest feeds arbitrary field values (NaN and infinite floats,
// huge counts, odd stop strings and request ids) through the checks every
// request passes before it reaches a worker: newJob (request id and
// validateSampling); the pipeline's FuzzValidateAgainst fuzzes the check
// against the workers' limits (the prompt, vocabulary and context
// arguments are kept for the corpus's sake). They must never panic, every
// refusal must be INVALID_ARGUMENT (a client's mistake, never INTERNAL), and
// what they accept must be what the limits promise to engines.
func FuzzValidateRequest(f *testing.F) {
	f.Add("req-1", float32(0.7), float32(0.9), float32(0), float32(0), float32(0), float32(1), int32(-1),
		uint32(16), uint32(0), uint8(0x7f), "</s>", uint8(1), []byte{1, 2, 3}, []byte{4, 5, 6, 7}, uint32(512), uint32(4096))
	f.Add("", float32(math.NaN()), float32(math.Inf(1)), float32(-0.0), float32(2.5), float32(-3), float32(0), int32(-2),
		uint32(0), uint32(9), uint8(0xff), "", uint8(70), []byte{}, []byte{}, uint32(0), uint32(0))
	f.Add(strings.Repeat("x", 300), float32(math.Inf(-1)), float32(1), float32(1.5), float32(-2), float32(2), float32(2), int32(0),
		uint32(math.MaxUint32), uint32(math.MaxUint32), uint8(0x01), "\xff\xfe", uint8(2), []byte{255, 255, 255, 255}, []byte{9}, uint32(8), uint32(10))
	f.Fuzz(func(t *testing.T, id string, temp, topP, minP, freq, pres, rep float32, topK int32,
		maxNew, minNew uint32, set uint8, stop string, nStop uint8, stopIDs, _ []byte, _, _ uint32) {
		sp := &kvgatev1.SamplingParams{MinNewTokens: minNew, Stop: make([]string, int(nStop))}
		for i := range sp.Stop {
			sp.Stop[i] = stop
		}
		// set chooses which optional fields are present, as in the wire
		// message.
		for bit, p := range []struct {
			dst **float32
			v   float32
		}{{&sp.Temperature, temp}, {&sp.TopP, topP}, {&sp.MinP, minP}, {&sp.FrequencyPenalty, freq},
			{&sp.PresencePenalty, pres}, {&sp.RepetitionPenalty, rep}} {
			if set&(1<<bit) != 0 {
				*p.dst = &p.v
			}
		}
		if set&(1<<6) != 0 {
			sp.TopK = &topK
		}
		if set&(1<<7) != 0 {
			sp.MaxNewTokens = &maxNew
		}
		sp.StopTokenIds = fuzzIDs(stopIDs, 1<<11)

		j, err := newJob(context.Background(), id, sp, set&1 != 0)
		if err != nil {
			wantInvalidArgument(t, "newJob", err)
			return
		}
		if j.ID == "" || len(j.ID) > maxRequestIDBytes {
			t.Fatalf("newJob accepted request id %q and kept %q", id, j.ID)
		}
		checkAccepted(t, j.Sampling)
	})
}

// fuzzIDs reads little-endian uint32 token ids from b, at most max of them.
func fuzzIDs(b []byte, max int) []uint32 {
	var ids []uint32
	for len(b) >= 4 && len(ids) < max {
		ids = append(ids, uint32(b[0])|uint32(b[1])<<8|uint32(b[2])<<16|uint32(b[3])<<24)
		b = b[4:]
	}
	return ids
}

func wantInvalidArgument(t *testing.T, what string, err error) {
	t.Helper()
	f, ok := fault.As(err)
	if !ok || f.Kind != fault.Invalid || f.Field == "" || f.Msg == "" {
		t.Fatalf("%s: %v (%#v); want an invalid-request fault naming its field, with a message", what, err, f)
	}
}

// checkAccepted: sampling parameters that passed validation are finite, in
// range, and within the limits on stop strings and ids.
func checkAccepted(t *testing.T, sp *kvgatev1.SamplingParams) {
	t.Helper()
	in := func(name string, v *float32, lo, hi float64, openLo bool) {
		if v == nil {
			return
		}
		x := float64(*v)
		if math.IsNaN(x) || math.IsInf(x, 0) || x < lo || x > hi || (openLo && x == lo) {
			t.Fatalf("accepted %s = %v", name, x)
		}
	}
	in("temperature", sp.Temperature, 0, math.MaxFloat32, false)
	in("top_p", sp.TopP, 0, 1, true)
	in("min_p", sp.MinP, 0, 1, false)
	in("frequency_penalty", sp.FrequencyPenalty, -2, 2, false)
	in("presence_penalty", sp.PresencePenalty, -2, 2, false)
	in("repetition_penalty", sp.RepetitionPenalty, 0, 2, true)
	switch {
	case sp.TopK != nil && *sp.TopK < -1:
		t.Fatalf("accepted top_k = %d", *sp.TopK)
	case sp.MaxNewTokens != nil && (*sp.MaxNewTokens == 0 || sp.MinNewTokens > *sp.MaxNewTokens):
		t.Fatalf("accepted max_new_tokens %d with min_new_tokens %d", *sp.MaxNewTokens, sp.MinNewTokens)
	case len(sp.Stop) > maxStopStrings || len(sp.StopTokenIds) > maxStopTokenIDs:
		t.Fatalf("accepted %d stop strings and %d stop token ids", len(sp.Stop), len(sp.StopTokenIds))
	}
	for _, s := range sp.Stop {
		if s == "" || len(s) > maxStopStringBytes {
			t.Fatalf("accepted stop string of %d bytes", len(s))
		}
	}
}

// FuzzRequestCodec decodes arbitrary bytes as each request message with the
// router's codec. It must never panic nor fail (grpc-go would answer
// INTERNAL): bytes that proto rejects come back as an empty message marked
// with a reason, which names the field when it is a UTF-8 problem; bytes that
// proto accepts decode to exactly what proto decodes, a GenerateRequest's
// input_ids read by pbwire included.
func FuzzRequestCodec(f *testing.F) {
	for _, m := range []proto.Message{
		&kvgatev1.GenerateRequest{RequestId: "r", InputIds: []uint32{1, 2, 3}, Stream: true,
			SamplingParams: &kvgatev1.SamplingParams{MaxNewTokens: proto.Uint32(8), Stop: []string{"</s>"}}},
		&kvgatev1.ChatRequest{Tools: []*kvgatev1.Tool{{Function: &kvgatev1.FunctionDefinition{Name: "f",
			Parameters: &structpb.Struct{Fields: map[string]*structpb.Value{"type": structpb.NewStringValue("object")}}}}},
			ChatTemplateKwargs: &structpb.Struct{Fields: map[string]*structpb.Value{"enable_thinking": structpb.NewBoolValue(false)}}},
		&kvgatev1.ExplainRequest{Request: &kvgatev1.ExplainRequest_Generate{Generate: &kvgatev1.GenerateRequest{Text: "hi"}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		for kind := range uint8(3) {
			f.Add(kind, b)
		}
	}
	f.Add(uint8(0), []byte{0x0a, 0x02, 0xff, 0xfe})       // request_id: invalid UTF-8
	f.Add(uint8(1), []byte{0x0a, 0x05, 0x12, 0x03, 0xc3}) // a nested message cut short
	f.Add(uint8(2), []byte{0xff, 0xff, 0xff, 0xff, 0xff}) // a tag that never ends
	// input_ids (2) packed, unpacked, as fixed32 (an unknown field to
	// protobuf), and a packed run ending inside a varint.
	f.Add(uint8(0), []byte{0x12, 0x03, 0x01, 0x96, 0x01, 0x10, 0x05, 0x15, 1, 2, 3, 4, 0x0a, 0x01, 'r', 0x12, 0x02, 0x07, 0x08})
	f.Add(uint8(0), []byte{0x12, 0x02, 0x01, 0x80})
	codec := newRequestCodec()
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		newMsg := func() proto.Message {
			switch kind % 3 {
			case 0:
				return &kvgatev1.GenerateRequest{}
			case 1:
				return &kvgatev1.ChatRequest{}
			}
			return &kvgatev1.ExplainRequest{}
		}
		got := newMsg()
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, got); err != nil {
			t.Fatalf("the codec failed (grpc-go would answer INTERNAL): %v", err)
		}
		want := newMsg()
		if err := proto.Unmarshal(data, want); err != nil {
			why, bad := undecodable(got)
			if !bad || why == "" {
				t.Fatalf("proto refused the bytes (%v), the codec did not mark the message", err)
			}
			if !utf8.ValidString(why) {
				t.Fatalf("reason %q is not valid UTF-8", why)
			}
			got.ProtoReflect().SetUnknown(nil)
			if !proto.Equal(got, newMsg()) {
				t.Fatalf("a message that did not decode kept fields: %v", got)
			}
			return
		}
		if !proto.Equal(got, want) {
			t.Fatalf("the codec decoded %v, proto %v", got, want)
		}
	})
}

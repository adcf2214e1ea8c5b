package pbwire_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/api/gen/trtllm"
	"github.com/kvgate/kvgate/internal/pbwire"
)

// TestAppendPacked holds the packed run to protowire's bytes at every
// varint length's edges.
func TestAppendPacked(t *testing.T) {
	tests := []struct {
		name string
		ids  []uint32
	}{
		{"none", nil},
		{"one byte", []uint32{0, 1, 127}},
		{"two bytes", []uint32{128, 16383}},
		{"three bytes", []uint32{16384, 1<<21 - 1}},
		{"four bytes", []uint32{1 << 21, 1<<28 - 1}},
		{"five bytes", []uint32{1 << 28, math.MaxUint32}},
		{"a prompt", []uint32{128000, 9906, 11, 1917, 0, 128001}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkAppendPacked(t, tt.ids)
		})
	}
}

func checkAppendPacked(t *testing.T, ids []uint32) {
	t.Helper()
	var want []byte
	for _, v := range ids {
		want = protowire.AppendVarint(want, uint64(v))
	}
	got := pbwire.AppendPacked([]byte{0xaa}, ids)
	if !bytes.Equal(got[1:], want) || got[0] != 0xaa {
		t.Errorf("AppendPacked(%v) = %x, want %x after the prefix", ids, got, want)
	}
	if n := pbwire.SizePacked(ids); n != len(want) {
		t.Errorf("SizePacked(%v) = %d, want %d", ids, n, len(want))
	}
}

// idsOf reads b as little-endian uint32s, the fuzzers' token ids; the low
// bits pick a varint length, so every length occurs.
func idsOf(b []byte) []uint32 {
	var ids []uint32
	for len(b) >= 4 {
		v := binary.LittleEndian.Uint32(b)
		ids = append(ids, v>>(v&31))
		b = b[4:]
	}
	return ids
}

func FuzzAppendPacked(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) { checkAppendPacked(t, idsOf(b)) })
}

// checkSplit holds SplitPacked to protobuf's decoding of b as a
// GenerateRequest, whose input_ids is field 2: where protobuf decodes b,
// the rest decodes and, with the values, is the same message; where it
// refuses b, the split refuses it or the rest is refused too.
func checkSplit(t *testing.T, b []byte) {
	t.Helper()
	var whole kvgatev1.GenerateRequest
	wholeErr := proto.Unmarshal(b, &whole)
	ids, rest, ok := pbwire.SplitPacked(b, 2, []byte{})
	if !ok {
		if wholeErr == nil && len(whole.InputIds) > 0 {
			t.Fatalf("SplitPacked(%x) refused what protobuf decodes, with input_ids %v", b, whole.InputIds)
		}
		return
	}
	var split kvgatev1.GenerateRequest
	restErr := proto.Unmarshal(rest, &split)
	if (wholeErr == nil) != (restErr == nil) {
		t.Fatalf("SplitPacked(%x): protobuf's error on the whole %v, on the rest %v", b, wholeErr, restErr)
	}
	if wholeErr != nil {
		return
	}
	split.InputIds = ids
	if !proto.Equal(&whole, &split) || !slices.Equal(whole.InputIds, split.InputIds) {
		t.Fatalf("SplitPacked(%x) gives %v, protobuf %v", b, &split, &whole)
	}
}

func TestSplitPacked(t *testing.T) {
	full, err := proto.Marshal(&kvgatev1.GenerateRequest{RequestId: "r1", InputIds: []uint32{1, 300, 70000, math.MaxUint32},
		Text: "hi", Stream: true, SamplingParams: &kvgatev1.SamplingParams{}})
	if err != nil {
		t.Fatal(err)
	}
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := []struct {
		name string
		b    []byte
	}{
		{"as protobuf writes it", full},
		{"no ids", []byte{0x0a, 0x01, 'x'}},
		{"empty", nil},
		{"unpacked", cat(tag(2, protowire.VarintType), []byte{0x96, 0x01}, tag(2, protowire.VarintType), []byte{0x05})},
		{"packed and unpacked, between other fields", cat(full, tag(2, protowire.VarintType), []byte{0x07}, []byte{0x0a, 0x01, 'y'}, tag(2, protowire.BytesType), []byte{0x02, 0x01, 0x02})},
		{"the field as fixed32: an unknown field", cat(tag(2, protowire.Fixed32Type), []byte{1, 2, 3, 4}, tag(2, protowire.VarintType), []byte{0x01})},
		{"a packed run ending inside a varint", cat(tag(2, protowire.BytesType), []byte{0x02, 0x01, 0x80})},
		{"a packed run of a varint too long", cat(tag(2, protowire.BytesType), []byte{0x0b}, bytes.Repeat([]byte{0xff}, 10), []byte{0x01})},
		{"a packed run with a ten-byte varint", cat(tag(2, protowire.BytesType), []byte{0x0a}, bytes.Repeat([]byte{0xff}, 9), []byte{0x01})},
		{"a packed run with a ten-byte varint overflowing", cat(tag(2, protowire.BytesType), []byte{0x0a}, bytes.Repeat([]byte{0xff}, 9), []byte{0x02})},
		{"a length past the end", cat(tag(2, protowire.BytesType), []byte{0x05, 0x01})},
		{"a string not UTF-8", cat([]byte{0x0a, 0x01, 0xff}, tag(2, protowire.VarintType), []byte{0x01})},
		{"field number 0", cat(tag(2, protowire.VarintType), []byte{0x01, 0x00, 0x00})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkSplit(t, tt.b) })
	}
}

func FuzzSplitPacked(f *testing.F) {
	full, err := proto.Marshal(&kvgatev1.GenerateRequest{RequestId: "r1", InputIds: []uint32{1, 300, 70000}, Text: "hi"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	f.Add([]byte{0x10, 0x96, 0x01, 0x12, 0x02, 0x01, 0x02})
	f.Fuzz(checkSplit)
}

// checkPackedAt holds PackedAt to protobuf: msg marshalled without its ids,
// with the ids written at the path, has the bytes of msg marshalled whole.
func checkPackedAt(t *testing.T, path pbwire.PackedAt, without, whole proto.Message, ids []uint32) {
	t.Helper()
	rest, err := proto.Marshal(without)
	if err != nil {
		t.Fatal(err)
	}
	want, err := proto.Marshal(whole)
	if err != nil {
		t.Fatal(err)
	}
	n, err := path.Len(rest, pbwire.NewRun(ids))
	if err != nil {
		t.Fatal(err)
	}
	got, err := path.Append([]byte{0xaa}, rest, pbwire.NewRun(ids))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[1:], want) || got[0] != 0xaa {
		t.Fatalf("PackedAt%v.Append = %x, protobuf %x", path, got[1:], want)
	}
	if n != len(want) {
		t.Fatalf("PackedAt%v.Len = %d, written %d", path, n, len(want))
	}
}

// promptCase is one engine request, built without its ids and whole.
type promptCase struct {
	name          string
	path          pbwire.PackedAt
	without, with func(ids []uint32) proto.Message
}

func promptCases(text, id string, query []uint32) []promptCase {
	return []promptCase{
		{"sglang", pbwire.PackedAt{2, 2},
			func([]uint32) proto.Message {
				return &sglang.GenerateRequest{RequestId: id, Tokenized: &sglang.TokenizedInput{OriginalText: text}, Stream: true}
			},
			func(ids []uint32) proto.Message {
				return &sglang.GenerateRequest{RequestId: id, Tokenized: &sglang.TokenizedInput{OriginalText: text, InputIds: ids}, Stream: true}
			}},
		{"sglang, no tokenized message", pbwire.PackedAt{2, 2},
			func([]uint32) proto.Message { return &sglang.GenerateRequest{RequestId: id, Stream: true} },
			func(ids []uint32) proto.Message {
				if len(ids) == 0 {
					return &sglang.GenerateRequest{RequestId: id, Stream: true}
				}
				return &sglang.GenerateRequest{RequestId: id, Tokenized: &sglang.TokenizedInput{InputIds: ids}, Stream: true}
			}},
		{"trtllm, a field after the ids", pbwire.PackedAt{2, 2},
			func([]uint32) proto.Message {
				return &trtllm.GenerateRequest{RequestId: id, Tokenized: &trtllm.TokenizedInput{OriginalText: text, QueryTokenIds: query}, Streaming: true}
			},
			func(ids []uint32) proto.Message {
				return &trtllm.GenerateRequest{RequestId: id, Tokenized: &trtllm.TokenizedInput{OriginalText: text, InputTokenIds: ids, QueryTokenIds: query}, Streaming: true}
			}},
		{"the field at the top", pbwire.PackedAt{2},
			func([]uint32) proto.Message { return &kvgatev1.GenerateRequest{RequestId: id, Text: text} },
			func(ids []uint32) proto.Message {
				return &kvgatev1.GenerateRequest{RequestId: id, InputIds: ids, Text: text}
			}},
	}
}

func TestPackedAt(t *testing.T) {
	long := make([]uint32, 5000)
	for i := range long {
		long[i] = uint32(i * 7919 % 150000)
	}
	for _, ids := range [][]uint32{nil, {7}, {1, 300, 70000, math.MaxUint32}, long} {
		for _, c := range promptCases("some text", "req-1", []uint32{9, 10}) {
			t.Run(c.name, func(t *testing.T) { checkPackedAt(t, c.path, c.without(ids), c.with(ids), ids) })
		}
	}
}

func FuzzPackedAt(f *testing.F) {
	f.Add("text", "id", []byte{1, 0, 0, 0, 0xff, 0xff, 0, 0})
	f.Fuzz(func(t *testing.T, text, id string, b []byte) {
		ids := idsOf(b)
		for _, c := range promptCases(text, id, ids[len(ids)/2:]) {
			// proto.Marshal refuses a string that is not UTF-8; so does the caller.
			if _, err := proto.Marshal(c.without(nil)); err != nil {
				return
			}
			checkPackedAt(t, c.path, c.without(ids), c.with(ids), ids)
		}
	})
}

func BenchmarkPrompt(b *testing.B) {
	ids := make([]uint32, 1024)
	for i := range ids {
		ids[i] = uint32(i * 7919 % 128256)
	}
	whole := &sglang.GenerateRequest{RequestId: "req-1", Tokenized: &sglang.TokenizedInput{InputIds: ids}, Stream: true}
	without := &sglang.GenerateRequest{RequestId: "req-1", Tokenized: &sglang.TokenizedInput{}, Stream: true}
	wire, err := proto.Marshal(&kvgatev1.GenerateRequest{RequestId: "req-1", InputIds: ids, Stream: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("marshal/protobuf", func(b *testing.B) {
		for b.Loop() {
			buf := make([]byte, 0, proto.Size(whole))
			if _, err := (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(buf, whole); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("marshal/pbwire", func(b *testing.B) {
		path := pbwire.PackedAt{2, 2}
		for b.Loop() {
			rest, err := proto.Marshal(without)
			if err != nil {
				b.Fatal(err)
			}
			run := pbwire.NewRun(ids)
			n, _ := path.Len(rest, run)
			if _, err := path.Append(make([]byte, 0, n), rest, run); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unmarshal/protobuf", func(b *testing.B) {
		for b.Loop() {
			var r kvgatev1.GenerateRequest
			if err := proto.Unmarshal(wire, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unmarshal/pbwire", func(b *testing.B) {
		for b.Loop() {
			var r kvgatev1.GenerateRequest
			ids, rest, ok := pbwire.SplitPacked(wire, 2, nil)
			if !ok {
				b.Fatal("not split")
			}
			if err := proto.Unmarshal(rest, &r); err != nil {
				b.Fatal(err)
			}
			r.InputIds = ids
		}
	})
}

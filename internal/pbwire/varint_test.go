package pbwire

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestShortReads holds the inline reads to protowire's on the
// short forms they read themselves, the long forms they hand over, and
// malformed input: an error (a negative length), never a panic.
func TestShortReads(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"one byte", []byte{0x08}},
		{"field number 0", []byte{0x00}},
		{"field number 0, wire type 2", []byte{0x02, 0x00}},
		{"two-byte varint", []byte{0x96, 0x01}},
		{"two-byte varint, overlong zero", []byte{0x80, 0x00}},
		{"three-byte varint", []byte{0xff, 0xff, 0x7f}},
		{"four-byte varint", []byte{0xff, 0xff, 0xff, 0x07}},
		{"ten-byte varint", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"eleven-byte varint", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"truncated varint", []byte{0x80}},
		{"truncated two-byte varint", []byte{0x80, 0x80}},
		{"length 3 of 3", []byte{0x03, 1, 2, 3}},
		{"length 3 of 2", []byte{0x03, 1, 2}},
		{"length 0", []byte{0x00}},
		{"two-byte length, truncated", []byte{0x80, 0x01, 1}},
		{"largest field number", protowire.AppendTag(nil, protowire.MaxValidNumber, protowire.BytesType)},
		{"field number past the largest", protowire.AppendVarint(nil, uint64(protowire.MaxValidNumber+1)<<3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkShortReads(t, tt.b)
		})
	}
}

func checkShortReads(t *testing.T, b []byte) {
	t.Helper()
	num, typ, n := ConsumeTag(b)
	wnum, wtyp, wn := protowire.ConsumeTag(b)
	if wn >= 0 && !wnum.IsValid() {
		wnum, wtyp, wn = 0, 0, -1
	}
	if (n < 0) != (wn < 0) || n >= 0 && (num != wnum || typ != wtyp || n != wn) {
		t.Errorf("ConsumeTag(%x) = %d, %d, %d; protowire %d, %d, %d", b, num, typ, n, wnum, wtyp, wn)
	}
	v, n := ConsumeVarint(b)
	wv, wn := protowire.ConsumeVarint(b)
	if (n < 0) != (wn < 0) || n >= 0 && (v != wv || n != wn) {
		t.Errorf("ConsumeVarint(%x) = %d, %d; protowire %d, %d", b, v, n, wv, wn)
	}
	bs, n := ConsumeBytes(b)
	wbs, wn := protowire.ConsumeBytes(b)
	if (n < 0) != (wn < 0) || n >= 0 && (!slices.Equal(bs, wbs) || n != wn) {
		t.Errorf("ConsumeBytes(%x) = %x, %d; protowire %x, %d", b, bs, n, wbs, wn)
	}
	for _, typ := range []protowire.Type{protowire.VarintType, protowire.BytesType} {
		var got, want []uint32
		n := AppendVarints(&got, typ, b)
		wn := protowireVarints(&want, typ, b)
		if (n < 0) != (wn < 0) || n >= 0 && (!slices.Equal(got, want) || n != wn) {
			t.Errorf("AppendVarints(%v, %x) = %v, %d; protowire %v, %d", typ, b, got, n, want, wn)
		}
	}
}

// protowireVarints is AppendVarints through protowire alone.
func protowireVarints(dst *[]uint32, typ protowire.Type, b []byte) int {
	if typ == protowire.VarintType {
		v, m := protowire.ConsumeVarint(b)
		if m >= 0 {
			*dst = append(*dst, uint32(v))
		}
		return m
	}
	packed, m := protowire.ConsumeBytes(b)
	var out []uint32
	for m >= 0 && len(packed) > 0 {
		v, k := protowire.ConsumeVarint(packed)
		if k < 0 {
			return -1
		}
		out = append(out, uint32(v))
		packed = packed[k:]
	}
	if m >= 0 {
		*dst = append(*dst, out...)
	}
	return m
}

func FuzzShortReads(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x96, 0x01})
	f.Add([]byte{0x05, 0x80, 0x01, 0xff, 0x7f, 0x00})
	f.Add([]byte{0x80, 0x80, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		checkShortReads(t, b)
	})
}

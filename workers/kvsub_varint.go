package workers

import (
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// The wire decoder's reads of tags, lengths and varints. A full engine's
// batch is mostly small fields (a tag, a length, a block's 16 token ids
// of up to three bytes each), and protowire's functions are too large to
// inline: a call per token and per field was most of what decoding cost.
// Each function here reads the common short forms inline and leaves the
// rest to protowire, so the two agree on every input (FuzzKVEventWire
// holds the decoder to the generated types).

// consumeTag is protowire.ConsumeTag refusing, as protobuf's decoder does,
// a field number above the largest valid one.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	if len(b) > 0 && b[0] < 0x80 {
		if b[0] < 1<<3 {
			return 0, 0, -1 // field number 0
		}
		return protowire.Number(b[0] >> 3), protowire.Type(b[0] & 7), 1
	}
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && !num.IsValid() {
		return 0, 0, -1
	}
	return num, typ, n
}

// consumeBytes is protowire.ConsumeBytes: a length-delimited value and the
// bytes of b it took, -1 when b does not hold it.
func consumeBytes(b []byte) ([]byte, int) {
	if len(b) > 0 && b[0] < 0x80 {
		n := int(b[0]) + 1
		if n > len(b) {
			return nil, -1
		}
		return b[1:n], n
	}
	return protowire.ConsumeBytes(b)
}

// consumeVarint is protowire.ConsumeVarint.
func consumeVarint(b []byte) (uint64, int) {
	switch {
	case len(b) > 0 && b[0] < 0x80:
		return uint64(b[0]), 1
	case len(b) > 1 && b[1] < 0x80:
		return uint64(b[0]&0x7f) | uint64(b[1])<<7, 2
	case len(b) > 2 && b[2] < 0x80:
		return uint64(b[0]&0x7f) | uint64(b[1]&0x7f)<<7 | uint64(b[2])<<14, 3
	}
	return protowire.ConsumeVarint(b)
}

// appendVarints appends a repeated varint field's values to dst, as
// protobuf reads them (a uint32 keeps the low 32 bits), whether the field
// is unpacked (typ VarintType: one value) or packed (BytesType: a run of
// them), and returns the bytes of b it took; -1 when b does not hold a
// whole field.
func appendVarints[T uint32 | int64](dst *[]T, typ protowire.Type, b []byte) int {
	if typ == protowire.VarintType {
		v, m := consumeVarint(b)
		if m >= 0 {
			*dst = append(*dst, T(v))
		}
		return m
	}
	packed, m := consumeBytes(b)
	if m < 0 {
		return m
	}
	// Every value takes a byte at least, so growing by the run's length
	// once leaves the loop no reallocation; the short forms are read in
	// the loop itself (consumeVarint is too large to inline there).
	out := slices.Grow(*dst, len(packed))
	for len(packed) > 0 {
		var v uint64
		var k int
		switch b0 := packed[0]; {
		case b0 < 0x80:
			v, k = uint64(b0), 1
		case len(packed) > 1 && packed[1] < 0x80:
			v, k = uint64(b0&0x7f)|uint64(packed[1])<<7, 2
		case len(packed) > 2 && packed[2] < 0x80:
			v, k = uint64(b0&0x7f)|uint64(packed[1]&0x7f)<<7|uint64(packed[2])<<14, 3
		default:
			if v, k = protowire.ConsumeVarint(packed); k < 0 {
				return -1
			}
		}
		out = append(out, T(v))
		packed = packed[k:]
	}
	*dst = out
	return m
}

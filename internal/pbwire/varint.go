// Package pbwire reads and writes the protobuf wire forms kvgate's hot
// paths carry in bulk: tags, lengths, and runs of token ids as packed
// varints. protowire's functions are too large to inline, so a call per
// token was most of what decoding a KV event batch, or a client's prompt of
// token ids, cost; and protobuf's marshalling walks a packed run three
// times (gRPC's codec sizes the message, then the marshal sizes the run
// again and writes it). Each function here handles the short forms inline
// and leaves the rest to protowire, and agrees with protowire, and with
// protobuf's decoding, on every input (the fuzz targets of this package,
// FuzzKVEventWire in workers, and the codecs' own).
package pbwire

import (
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// ConsumeTag is protowire.ConsumeTag refusing, as protobuf's decoder does,
// a field number above the largest valid one.
func ConsumeTag(b []byte) (protowire.Number, protowire.Type, int) {
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

// ConsumeBytes is protowire.ConsumeBytes: a length-delimited value and the
// bytes of b it took, -1 when b does not hold it.
func ConsumeBytes(b []byte) ([]byte, int) {
	if len(b) > 0 && b[0] < 0x80 {
		n := int(b[0]) + 1
		if n > len(b) {
			return nil, -1
		}
		return b[1:n], n
	}
	return protowire.ConsumeBytes(b)
}

// ConsumeVarint is protowire.ConsumeVarint.
func ConsumeVarint(b []byte) (uint64, int) {
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

// AppendVarints appends a repeated varint field's values to dst, as
// protobuf reads them (a uint32 keeps the low 32 bits), whether the field
// is unpacked (typ VarintType: one value) or packed (BytesType: a run of
// them), and returns the bytes of b it took; -1 when b does not hold a
// whole field.
func AppendVarints[T uint32 | int64](dst *[]T, typ protowire.Type, b []byte) int {
	if typ == protowire.VarintType {
		v, m := ConsumeVarint(b)
		if m >= 0 {
			*dst = append(*dst, T(v))
		}
		return m
	}
	packed, m := ConsumeBytes(b)
	if m < 0 {
		return m
	}
	// Every value takes a byte at least, so growing by the run's length
	// once leaves the loop no reallocation.
	out, ok := appendRun(slices.Grow(*dst, len(packed)), packed)
	if !ok {
		return -1
	}
	*dst = out
	return m
}

// appendRun appends the values of a packed run to out, reading the short
// forms in the loop itself (ConsumeVarint is too large to inline there);
// false when the run ends inside a value or holds one too long.
func appendRun[T uint32 | int64](out []T, packed []byte) ([]T, bool) {
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
				return out, false
			}
		}
		out = append(out, T(v))
		packed = packed[k:]
	}
	return out, true
}

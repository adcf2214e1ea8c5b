package pbwire

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"google.golang.org/protobuf/encoding/protowire"
)

// SizePacked is the length of ids as a packed run of varints (without the
// field's tag and length).
func SizePacked(ids []uint32) int {
	n := 0
	for _, v := range ids {
		n += (bits.Len32(v|1) + 6) / 7
	}
	return n
}

// AppendPacked appends ids to dst as a packed run of varints, the bytes
// protowire.AppendVarint would write for each. It writes the short forms
// itself (a call per value was what protowire cost) and grows dst as
// append does: a caller that sized dst by SizePacked gets no copy.
func AppendPacked(dst []byte, ids []uint32) []byte {
	for _, v := range ids {
		switch {
		case v < 1<<7:
			dst = append(dst, byte(v))
		case v < 1<<14:
			dst = append(dst, byte(v)|0x80, byte(v>>7))
		case v < 1<<21:
			dst = append(dst, byte(v)|0x80, byte(v>>7)|0x80, byte(v>>14))
		case v < 1<<28:
			dst = append(dst, byte(v)|0x80, byte(v>>7)|0x80, byte(v>>14)|0x80, byte(v>>21))
		default:
			dst = append(dst, byte(v)|0x80, byte(v>>7)|0x80, byte(v>>14)|0x80, byte(v>>21)|0x80, byte(v>>28))
		}
	}
	return dst
}

// countVarints is how many varints run holds: one per byte without the
// continuation bit, counted eight bytes at a time. A run that ends inside
// a varint is refused when it is decoded.
func countVarints(run []byte) int {
	n := 0
	for ; len(run) >= 8; run = run[8:] {
		n += bits.OnesCount64(^binary.LittleEndian.Uint64(run) & 0x8080808080808080)
	}
	for _, c := range run {
		if c < 0x80 {
			n++
		}
	}
	return n
}

// SplitPacked takes the occurrences of field num, a repeated uint32, out of
// the message bytes b: it returns the field's values, in order, and the
// rest of b (every other field, in order) appended to rest. Each occurrence
// may be packed or one varint, as protobuf reads either; one of another
// wire type is not the field to protobuf's decoder (it keeps it as an
// unknown field) and stays in the rest. Decoding the rest with protobuf and
// setting the field to the values gives the message protobuf decodes from
// b. ok is false when b is not well-formed protobuf, or the field never
// occurs; the caller then decodes b as it stands.
func SplitPacked(b []byte, num protowire.Number, rest []byte) (ids []uint32, out []byte, ok bool) {
	// Two passes: the first checks the framing and counts the values, so
	// the second allocates the values once, at their size.
	count, found := 0, false
	for p := b; len(p) > 0; {
		n, typ, k := ConsumeTag(p)
		if k < 0 {
			return nil, rest, false
		}
		m := protowire.ConsumeFieldValue(n, typ, p[k:])
		if m < 0 {
			return nil, rest, false
		}
		if n == num {
			switch typ {
			case protowire.BytesType:
				run, _ := ConsumeBytes(p[k:])
				count, found = count+countVarints(run), true
			case protowire.VarintType:
				count, found = count+1, true
			}
		}
		p = p[k+m:]
	}
	if !found {
		return nil, rest, false
	}
	ids = make([]uint32, 0, count)
	for p := b; len(p) > 0; {
		n, typ, k := ConsumeTag(p)
		m := protowire.ConsumeFieldValue(n, typ, p[k:])
		switch {
		case n == num && typ == protowire.BytesType:
			run, _ := ConsumeBytes(p[k:])
			if ids, ok = appendRun(ids, run); !ok {
				return nil, rest, false
			}
		case n == num && typ == protowire.VarintType:
			v, _ := ConsumeVarint(p[k:])
			ids = append(ids, uint32(v))
		default:
			rest = append(rest, p[:k+m]...)
		}
		p = p[k+m:]
	}
	return ids, rest, true
}

// Run is a run of token ids to be written packed, with its length on the
// wire, counted once.
type Run struct {
	ids  []uint32
	size int
}

// NewRun returns ids as a Run.
func NewRun(ids []uint32) Run { return Run{ids, SizePacked(ids)} }

// PackedAt writes a packed run of token ids into a message's wire bytes,
// so that a large request is marshalled by protobuf without its ids and
// the ids are written in one pass. Path names the field: the numbers of
// the message fields leading to it, then its own.
type PackedAt []protowire.Number

// Len is the length of msg with r written at p: what Append adds to dst.
func (p PackedAt) Len(msg []byte, r Run) (int, error) {
	if len(r.ids) == 0 {
		return len(msg), nil
	}
	return p.grown(msg, r.size)
}

// Append appends msg, the wire bytes of a message, to dst with r's ids
// added to the repeated field at p, as protobuf adds them to what the
// field holds (a message built without them holds none). The field is
// written before the first of its message's fields numbered above it,
// where protobuf's marshalling writes it, so a message whose ids are
// written here has the bytes protobuf would give it whole; the message
// fields on the path are made where msg lacks them. With no ids, msg is
// appended as it is. A dst of Len's room is not copied.
func (p PackedAt) Append(dst, msg []byte, r Run) ([]byte, error) {
	if len(r.ids) == 0 || len(p) == 0 {
		return append(dst, msg...), nil
	}
	return p.appendGrown(dst, msg, r.ids, r.size)
}

// grown is the length of msg once a run of body bytes is written at p.
func (p PackedAt) grown(msg []byte, body int) (int, error) {
	if body == 0 || len(p) == 0 {
		return len(msg), nil
	}
	lo, hi, inner, err := p.place(msg)
	if err != nil {
		return 0, err
	}
	if len(p) == 1 {
		return len(msg) + protowire.SizeTag(p[0]) + protowire.SizeBytes(body), nil
	}
	n, err := p[1:].grown(inner, body)
	if err != nil {
		return 0, err
	}
	return len(msg) - (hi - lo) + protowire.SizeTag(p[0]) + protowire.SizeBytes(n), nil
}

func (p PackedAt) appendGrown(dst, msg []byte, ids []uint32, body int) ([]byte, error) {
	lo, hi, inner, err := p.place(msg)
	if err != nil {
		return dst, err
	}
	dst = append(dst, msg[:lo]...)
	dst = protowire.AppendTag(dst, p[0], protowire.BytesType)
	if len(p) == 1 {
		dst = protowire.AppendVarint(dst, uint64(body))
		dst = AppendPacked(dst, ids)
	} else {
		n, err := p[1:].grown(inner, body)
		if err != nil {
			return dst, err
		}
		dst = protowire.AppendVarint(dst, uint64(n))
		if dst, err = p[1:].appendGrown(dst, inner, ids, body); err != nil {
			return dst, err
		}
	}
	return append(dst, msg[hi:]...), nil
}

// place finds where p's first field goes in msg: for the last field of
// the path, an empty span before the first field numbered above it; for a
// message field on the path, its last occurrence (the one protobuf's
// marshalling writes; an earlier one would be merged with it by a reader)
// and its contents, or an empty span where it would be written.
func (p PackedAt) place(msg []byte) (lo, hi int, inner []byte, err error) {
	at := -1
	for pos := 0; pos < len(msg); {
		n, typ, k := ConsumeTag(msg[pos:])
		if k < 0 {
			return 0, 0, nil, fmt.Errorf("pbwire: a tag at byte %d of %d", pos, len(msg))
		}
		m := protowire.ConsumeFieldValue(n, typ, msg[pos+k:])
		if m < 0 {
			return 0, 0, nil, fmt.Errorf("pbwire: field %d at byte %d of %d", n, pos, len(msg))
		}
		if len(p) > 1 && n == p[0] && typ == protowire.BytesType {
			v, _ := ConsumeBytes(msg[pos+k:])
			lo, hi, inner = pos, pos+k+m, v
		}
		if n > p[0] && at < 0 {
			at = pos
		}
		pos += k + m
	}
	if inner != nil || hi > 0 {
		return lo, hi, inner, nil
	}
	if at < 0 {
		at = len(msg)
	}
	return at, at, nil, nil
}

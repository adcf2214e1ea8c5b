package server

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec wrapped below
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// requestCodec is gRPC's proto codec with one difference. A request whose
// string field is not valid UTF-8 fails to decode, and grpc-go answers that
// with INTERNAL before any handler runs, blaming the router for the client's
// bytes. This codec instead hands the handler an empty request marked with
// the offending field's name, and the handler answers INVALID_ARGUMENT.
type requestCodec struct{ encoding.CodecV2 }

func newRequestCodec() requestCodec { return requestCodec{encoding.GetCodecV2("proto")} }

// markerField carries the name of the field that did not decode, as an
// unknown field no kvgate message defines (the largest field number).
const markerField = protowire.MaxValidNumber

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err
	}
	field := invalidUTF8Field(m.ProtoReflect().Descriptor(), data.Materialize(), "")
	if field == "" {
		return err
	}
	proto.Reset(m)
	mark := protowire.AppendTag(nil, markerField, protowire.BytesType)
	mark = protowire.AppendString(mark, field)
	m.ProtoReflect().SetUnknown(mark)
	return nil
}

// undecodable reports the field a request's codec could not decode.
func undecodable(m proto.Message) (string, bool) {
	b := m.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
		if num == markerField && typ == protowire.BytesType {
			v, _ := protowire.ConsumeString(b)
			return v, true
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
	}
	return "", false
}

// invalidUTF8Field finds the first string field in the wire bytes of a
// message of type md that is not valid UTF-8, as a path like
// "messages[1].content"; "" when there is none.
func invalidUTF8Field(md protoreflect.MessageDescriptor, b []byte, prefix string) string {
	seen := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if fd == nil || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		name := prefix + string(fd.Name())
		if fd.IsList() {
			name = fmt.Sprintf("%s[%d]", name, seen[num])
			seen[num]++
		}
		switch fd.Kind() {
		case protoreflect.StringKind:
			if !utf8.Valid(v) {
				return name
			}
		case protoreflect.MessageKind:
			if !fd.IsMap() {
				if f := invalidUTF8Field(fd.Message(), v, name+"."); f != "" {
					return f
				}
			}
		}
	}
	return ""
}

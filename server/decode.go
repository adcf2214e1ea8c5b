package server

import (
	"context"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec wrapped below
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	kvgatev1 "github.com/kvgate/kvgate/api/gen/kvgate/v1"
	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/pbwire"
)

// requestCodec is gRPC's proto codec with two differences. A request that
// fails to decode (a string field that is not valid UTF-8, or bytes that are
// not the message at all) is answered by grpc-go with INTERNAL before any
// handler runs, blaming the router for the client's bytes. This codec instead
// hands over an empty request marked with what was wrong, and the
// rejectUndecodable interceptors answer INVALID_ARGUMENT with it. And a
// Generate request's token ids, most of its bytes, are read by pbwire rather
// than protobuf (BENCHMARKS.md, "The prompt's ids written once"), into the
// message protobuf would decode (FuzzRequestCodec holds the two together).
type requestCodec struct {
	encoding.CodecV2
	idsField protowire.Number // GenerateRequest.input_ids
}

func newRequestCodec() requestCodec {
	ids := (&kvgatev1.GenerateRequest{}).ProtoReflect().Descriptor().Fields().ByName("input_ids").Number()
	return requestCodec{encoding.GetCodecV2("proto"), ids}
}

// markerField carries the name of the field that did not decode, as an
// unknown field no kvgate message defines (the largest field number).
const markerField = protowire.MaxValidNumber

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	var err error
	if r, ok := v.(*kvgatev1.GenerateRequest); !ok || !c.unmarshalGenerate(data, r) {
		err = c.CodecV2.Unmarshal(data, v)
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err
	}
	if err == nil {
		// A client may send the marker's field number itself; it is ours,
		// so it is dropped rather than read as a decoding failure.
		if _, marked := undecodable(m); marked {
			dropMarker(m)
		}
		return nil
	}
	md := m.ProtoReflect().Descriptor()
	why := fmt.Sprintf("the request is not a valid %s message: %v", md.FullName(), err)
	if field := invalidUTF8Field(md, data.Materialize(), ""); field != "" {
		why = field + " is not valid UTF-8"
	}
	proto.Reset(m)
	mark := protowire.AppendTag(nil, markerField, protowire.BytesType)
	mark = protowire.AppendString(mark, why)
	m.ProtoReflect().SetUnknown(mark)
	return nil
}

// unmarshalGenerate decodes r from data with its input_ids read by pbwire
// and the rest by protobuf. False when data has no input_ids or does not
// decode: protobuf then decodes the whole, and says what was wrong.
func (c requestCodec) unmarshalGenerate(data mem.BufferSlice, r *kvgatev1.GenerateRequest) bool {
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	ids, rest, ok := pbwire.SplitPacked(buf.ReadOnlyData(), c.idsField, nil)
	if !ok || proto.Unmarshal(rest, r) != nil {
		return false
	}
	r.InputIds = ids
	return true
}

// rejectUndecodableUnary refuses, as an invalid request, a request the codec
// could not decode, before its handler runs.
func rejectUndecodableUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if m, ok := req.(proto.Message); ok {
		if why, bad := undecodable(m); bad {
			return nil, fault.Newf(fault.Invalid, "%s", why)
		}
	}
	return handler(ctx, req)
}

// rejectUndecodableStream does the same for the requests of streaming RPCs,
// as the handler receives them.
func rejectUndecodableStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, checkedStream{ss})
}

type checkedStream struct{ grpc.ServerStream }

func (s checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if pm, ok := m.(proto.Message); ok {
		if why, bad := undecodable(pm); bad {
			return fault.Newf(fault.Invalid, "%s", why)
		}
	}
	return nil
}

// dropMarker removes every marker field from m's unknown fields.
func dropMarker(m proto.Message) {
	b := m.ProtoReflect().GetUnknown()
	var kept []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		v := protowire.ConsumeFieldValue(num, typ, b[n:])
		if v < 0 {
			break
		}
		if num != markerField {
			kept = append(kept, b[:n+v]...)
		}
		b = b[n+v:]
	}
	m.ProtoReflect().SetUnknown(kept)
}

// undecodable reports why the codec could not decode a request.
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

// maxFieldSearchDepth bounds how deep invalidUTF8Field looks into nested
// messages: google.protobuf.Struct and Value nest as deep as a client
// likes, and nothing recurses on client data without a limit.
const maxFieldSearchDepth = 100

// invalidUTF8Field finds the first string field in the wire bytes of a
// message of type md that is not valid UTF-8, as a path like
// "messages[1].content"; "" when there is none within
// maxFieldSearchDepth levels.
func invalidUTF8Field(md protoreflect.MessageDescriptor, b []byte, prefix string) string {
	return invalidUTF8FieldAt(md, b, prefix, 0)
}

func invalidUTF8FieldAt(md protoreflect.MessageDescriptor, b []byte, prefix string, depth int) string {
	if depth >= maxFieldSearchDepth {
		return ""
	}
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
			// A map entry is a message of its key and value.
			if f := invalidUTF8FieldAt(fd.Message(), v, name+".", depth+1); f != "" {
				return f
			}
		}
	}
	return ""
}

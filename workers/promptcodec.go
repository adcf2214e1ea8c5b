package workers

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kvgate/kvgate/internal/pbwire"
)

// A Generate request carries the prompt's token ids, thousands of them,
// and the rest of it is a few dozen bytes. Marshalled by protobuf whole,
// the request took about 6% of the router's CPU at 1K-token prompts
// (BENCHMARKS.md, "The prompt's ids written once"). An adapter builds its
// request without the ids and sends it with withPrompt: the request is
// marshalled by protobuf and the ids written into it by pbwire, to the
// bytes protobuf would have written whole (TestPromptCodec, and pbwire's
// tests, hold the two together).

// promptField is where a protocol's Generate request holds its prompt's
// token ids: the request type and the path of field numbers to the ids.
type promptField struct {
	msg   protoreflect.FullName
	path  pbwire.PackedAt
	proto encoding.CodecV2 // gRPC's proto codec, for all but the ids
}

// newPromptField finds the field named by names (message fields, then the
// repeated uint32 of the ids) in m's type. It panics when m's type has no
// such field: the names are the adapters' constants, checked by their tests.
func newPromptField(m proto.Message, names ...protoreflect.Name) promptField {
	md := m.ProtoReflect().Descriptor()
	f := promptField{msg: md.FullName(), proto: encoding.GetCodecV2("proto")}
	for i, name := range names {
		fd := md.Fields().ByName(name)
		last := i == len(names)-1
		switch {
		case fd == nil:
			panic(fmt.Sprintf("workers: %s has no field %s", md.FullName(), name))
		case last && (fd.Kind() != protoreflect.Uint32Kind || !fd.IsList() || !fd.IsPacked()):
			panic(fmt.Sprintf("workers: %s.%s is not a packed repeated uint32", md.FullName(), name))
		case !last && (fd.Kind() != protoreflect.MessageKind || fd.IsList()):
			panic(fmt.Sprintf("workers: %s.%s is not a message field", md.FullName(), name))
		}
		f.path = append(f.path, fd.Number())
		if !last {
			md = fd.Message()
		}
	}
	return f
}

// withPrompt is the call option that sends a request of f's type, built
// without its ids, with ids written at f.
func (f promptField) withPrompt(ids []uint32) grpc.CallOption {
	return grpc.ForceCodecV2(promptCodec{f.proto, f, pbwire.NewRun(ids)})
}

// promptCodec is gRPC's proto codec, writing its prompt into the request
// of its type; every other message (the engine's replies) it leaves to
// protobuf.
type promptCodec struct {
	encoding.CodecV2
	field promptField
	ids   pbwire.Run
}

func (c promptCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok || m.ProtoReflect().Descriptor().FullName() != c.field.msg {
		return c.CodecV2.Marshal(v)
	}
	rest, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	n, err := c.field.path.Len(rest, c.ids)
	if err != nil {
		return nil, fmt.Errorf("workers: the prompt's ids in %s: %w", c.field.msg, err)
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(n)
	out, err := c.field.path.Append((*buf)[:0], rest, c.ids)
	if err != nil {
		pool.Put(buf)
		return nil, fmt.Errorf("workers: the prompt's ids in %s: %w", c.field.msg, err)
	}
	*buf = out
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

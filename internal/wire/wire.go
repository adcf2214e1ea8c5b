// Package wire describes gRPC protocols by what reaches the wire: service and
// method names, streaming, message names, field numbers, types and
// cardinalities. Two descriptions that print the same produce the same bytes
// for the same messages, whatever the files' layout, comments or Go options.
// kvgate uses it to hold its copies of the engine protocols to the engines'
// own definitions.
package wire

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Describe prints every service and message (nested ones included) and enum
// of the given proto packages found in files, one line per fact, sorted.
func Describe(files interface {
	RangeFiles(func(protoreflect.FileDescriptor) bool)
}, packages ...string) string {
	want := map[protoreflect.FullName]bool{}
	for _, p := range packages {
		want[protoreflect.FullName(p)] = true
	}
	var lines []string
	files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if !want[fd.Package()] {
			return true
		}
		for i := 0; i < fd.Services().Len(); i++ {
			lines = append(lines, describeService(fd.Services().Get(i))...)
		}
		lines = append(lines, describeMessages(fd.Messages())...)
		lines = append(lines, describeEnums(fd.Enums())...)
		return true
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

func describeService(sd protoreflect.ServiceDescriptor) []string {
	var out []string
	for i := 0; i < sd.Methods().Len(); i++ {
		m := sd.Methods().Get(i)
		out = append(out, fmt.Sprintf("rpc /%s/%s (%s%s) returns (%s%s)", sd.FullName(), m.Name(),
			stream(m.IsStreamingClient()), m.Input().FullName(), stream(m.IsStreamingServer()), m.Output().FullName()))
	}
	return out
}

func stream(b bool) string {
	if b {
		return "stream "
	}
	return ""
}

func describeMessages(ms protoreflect.MessageDescriptors) []string {
	var out []string
	for i := 0; i < ms.Len(); i++ {
		md := ms.Get(i)
		if md.IsMapEntry() {
			continue
		}
		out = append(out, fmt.Sprintf("message %s", md.FullName()))
		for j := 0; j < md.Fields().Len(); j++ {
			out = append(out, describeField(md, md.Fields().Get(j)))
		}
		out = append(out, describeMessages(md.Messages())...)
		out = append(out, describeEnums(md.Enums())...)
	}
	return out
}

func describeField(md protoreflect.MessageDescriptor, f protoreflect.FieldDescriptor) string {
	typ := f.Kind().String()
	switch {
	case f.IsMap():
		typ = fmt.Sprintf("map<%s,%s>", kindName(f.MapKey()), kindName(f.MapValue()))
	default:
		typ = kindName(f)
	}
	card := "singular"
	switch {
	case f.IsList():
		card = "repeated"
		if f.IsPacked() {
			card = "repeated packed"
		}
	case f.HasPresence():
		card = "presence"
	}
	oneof := ""
	if o := f.ContainingOneof(); o != nil && !o.IsSynthetic() {
		oneof = " oneof " + string(o.Name())
	}
	return fmt.Sprintf("field %s.%d %s %s %s%s", md.FullName(), f.Number(), f.Name(), card, typ, oneof)
}

func kindName(f protoreflect.FieldDescriptor) string {
	switch f.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return string(f.Message().FullName())
	case protoreflect.EnumKind:
		return string(f.Enum().FullName())
	}
	return f.Kind().String()
}

func describeEnums(es protoreflect.EnumDescriptors) []string {
	var out []string
	for i := 0; i < es.Len(); i++ {
		ed := es.Get(i)
		for j := 0; j < ed.Values().Len(); j++ {
			v := ed.Values().Get(j)
			out = append(out, fmt.Sprintf("enum %s %s=%d", ed.FullName(), v.Name(), v.Number()))
		}
	}
	return out
}

// EnginePackages are the proto packages of the engines' gRPC protocols.
var EnginePackages = []string{"sglang.grpc.scheduler", "vllm.grpc.engine", "smg.grpc.common"}

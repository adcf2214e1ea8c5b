#!/usr/bin/env python3
"""proto_parity: compare kvgate's engine protos with the published reference.

kvgate writes its own copies of the engines' gRPC protocols (api/proto/sglang,
api/proto/vllm, api/proto/smg, ...). Wire compatibility needs the same package,
service and method names, and the same field numbers, types and labels; the
reference is the `smg-grpc-proto` package on PyPI, pinned by `make
proto-parity`, which installs it into a virtual environment and runs this
program there.

Usage: proto_parity.py OURS.binpb
       proto_parity.py --self-test   (the comparison sees each kind of difference)

OURS.binpb is a FileDescriptorSet of api/proto (`buf build -o OURS.binpb`).
The reference descriptors are read from the installed package's generated
modules (their serialized FileDescriptorProto), never from a copy in the
repository. Every difference is printed; the exit status is 1 if there is one.
"""

import importlib
import sys

from google.protobuf import descriptor_pb2

# PAIRS maps each kvgate proto package to the reference module that defines
# the same package. A new engine protocol is one line here. required=False
# lets the check pass (with a note) while kvgate has no copy of that package
# yet; set it to True once the copy lands.
PAIRS = [
    # (package, reference module, required)
    ("smg.grpc.common", "common_pb2", True),
    ("sglang.grpc.scheduler", "sglang_scheduler_pb2", True),
    ("vllm.grpc.engine", "vllm_engine_pb2", True),
    ("trtllm", "trtllm_service_pb2", True),
]

# OWN_PACKAGES are kvgate's own APIs, which have no reference.
OWN_PACKAGES = ("kvgate.",)

LABELS = {v: k for k, v in descriptor_pb2.FieldDescriptorProto.Label.items()}
TYPES = {v: k for k, v in descriptor_pb2.FieldDescriptorProto.Type.items()}


def field_shape(f, oneofs):
    """What a field is on the wire and in the generated API."""
    oneof = ""
    if f.HasField("oneof_index") and not f.proto3_optional:
        oneof = oneofs[f.oneof_index]
    shape = f"{LABELS[f.label][6:].lower()} {f.type_name or TYPES[f.type][5:].lower()} {f.name}"
    if f.proto3_optional:
        shape += " (proto3 optional)"
    if oneof:
        shape += f" (oneof {oneof})"
    return shape


def flatten(fd):
    """A FileDescriptorProto as a dict of comparable items keyed by path."""
    items = {"package": fd.package}

    def enum(prefix, e):
        items[f"enum {prefix}{e.name}"] = "defined"
        for v in e.value:
            items[f"enum {prefix}{e.name} value {v.number}"] = v.name

    def message(prefix, m):
        name = f"{prefix}{m.name}"
        items[f"message {name}"] = "map entry" if m.options.map_entry else "defined"
        oneofs = [o.name for o in m.oneof_decl]
        # Reserved numbers are not on the wire, but a number reserved on one
        # side and used on the other is an old field read as a new one.
        for r in m.reserved_range:
            items[f"message {name} reserved {r.start}..{r.end - 1}"] = "reserved"
        for n in m.reserved_name:
            items[f"message {name} reserved name {n}"] = "reserved"
        for f in m.field:
            items[f"message {name} field {f.number}"] = field_shape(f, oneofs)
        for n in m.nested_type:
            message(name + ".", n)
        for e in m.enum_type:
            enum(name + ".", e)

    for m in fd.message_type:
        message("", m)
    for e in fd.enum_type:
        enum("", e)
    for s in fd.service:
        items[f"service {s.name}"] = "defined"
        for r in s.method:
            stream = lambda yes: "stream " if yes else ""  # noqa: E731
            items[f"service {s.name} rpc {r.name}"] = (
                f"({stream(r.client_streaming)}{r.input_type}) returns ({stream(r.server_streaming)}{r.output_type})")
    return items


def reference(module):
    mod = importlib.import_module(f"smg_grpc_proto.generated.{module}")
    fd = descriptor_pb2.FileDescriptorProto()
    mod.DESCRIPTOR.CopyToProto(fd)
    return fd


def compare(package, ours, theirs):
    """Differences between two flattened files, one line each."""
    a, b = flatten(ours), flatten(theirs)
    out = []
    for key in sorted(set(a) | set(b)):
        if key not in a:
            out.append(f"{package}: missing in kvgate: {key} = {b[key]!r}")
        elif key not in b:
            out.append(f"{package}: not in the reference: {key} = {a[key]!r}")
        elif a[key] != b[key]:
            out.append(f"{package}: {key}: kvgate {a[key]!r}, reference {b[key]!r}")
    return out


def self_test():
    """The comparison must see each kind of difference: each mutation of a
    reference file must yield exactly the expected report."""
    base = reference("vllm_engine_pb2")
    cases = []

    def case(name, mutate, want):
        fd = descriptor_pb2.FileDescriptorProto()
        fd.CopyFrom(base)
        mutate(fd)
        cases.append((name, compare(fd.package, fd, base), want))

    def msg(fd, name):
        return next(m for m in fd.message_type if m.name == name)

    def renumber(fd):
        msg(fd, "GenerateComplete").field[0].number = 99
    case("a field renumbered", renumber, ["field 1", "field 99"])
    case("a field's type changed",
         lambda fd: setattr(msg(fd, "GenerateComplete").field[2], "type", descriptor_pb2.FieldDescriptorProto.TYPE_INT64),
         ["GenerateComplete field 3: kvgate 'optional int64 prompt_tokens', reference 'optional uint32 prompt_tokens'"])
    case("a message dropped", lambda fd: fd.message_type.remove(msg(fd, "MediaRefs")), ["missing in kvgate: message MediaRefs"])
    case("an rpc dropped", lambda fd: fd.service[0].method.pop(), ["missing in kvgate: service VllmEngine rpc"])
    case("streaming changed", lambda fd: setattr(fd.service[0].method[0], "server_streaming", False),
         ["rpc Generate: kvgate '(.vllm.grpc.engine.GenerateRequest) returns (.vllm.grpc.engine.GenerateResponse)'"])
    case("a reserved range dropped", lambda fd: msg(fd, "MultimodalInputs").ClearField("reserved_range"),
         ["missing in kvgate: message MultimodalInputs reserved 1..1"])
    case("the same file", lambda fd: None, [])
    failed = 0
    for name, got, want in cases:
        ok = all(any(w in g for g in got) for w in want) if want else not got
        print(f"{'ok  ' if ok else 'FAIL'} self-test: {name}: {len(got)} differences")
        if not ok:
            failed += 1
            print("  got:\n    " + "\n    ".join(got) + "\n  want lines containing: " + repr(want))
    return 1 if failed else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        sys.exit(__doc__)
    fds = descriptor_pb2.FileDescriptorSet()
    with open(argv[1], "rb") as f:
        fds.ParseFromString(f.read())
    ours = {}
    for fd in fds.file:
        if fd.name.startswith("google/") or fd.package.startswith(OWN_PACKAGES):
            continue
        if fd.package in ours:
            sys.exit(f"proto-parity: two kvgate files declare package {fd.package}")
        ours[fd.package] = fd

    import smg_grpc_proto  # noqa: F401 (the version is printed below)
    from importlib.metadata import version
    print(f"proto-parity: reference smg-grpc-proto {version('smg-grpc-proto')}")

    diffs = []
    paired = set()
    for package, module, required in PAIRS:
        paired.add(package)
        if package not in ours:
            if required:
                diffs.append(f"{package}: kvgate has no proto for it (reference {module})")
            else:
                print(f"note {package}: kvgate has no copy yet; {module} not compared")
            continue
        theirs = reference(module)
        if theirs.package != package:
            diffs.append(f"{package}: reference {module} declares package {theirs.package}")
            continue
        found = compare(package, ours[package], theirs)
        diffs.extend(found)
        print(f"{'FAIL' if found else 'ok  '} {package} ({ours[package].name} against {module}): {len(found)} differences")
    for package, fd in sorted(ours.items()):
        if package not in paired:
            diffs.append(f"{package} ({fd.name}): an engine proto with no reference pair in PAIRS")
    for d in diffs:
        print("  " + d)
    print(f"proto-parity: {len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

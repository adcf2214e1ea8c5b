// Command dump prints the wire description (see package wire) of the engine
// protocols in a FileDescriptorSet read from standard input, such as the one
// `buf build --as-file-descriptor-set -o -` writes. scripts/wire-golden.sh uses
// it to record the engines' own definitions. Arguments, when given, name the
// packages to describe instead of wire.EnginePackages (scripts/wire-golden-trtllm.sh
// describes package trtllm alone).
package main

import (
	"fmt"
	"io"
	"os"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/kvgate/kvgate/internal/wire"
)

func main() {
	pkgs := wire.EnginePackages
	if len(os.Args) > 1 {
		pkgs = os.Args[1:]
	}
	if err := run(os.Stdin, os.Stdout, pkgs); err != nil {
		fmt.Fprintln(os.Stderr, "dump:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer, pkgs []string) error {
	b, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		return fmt.Errorf("read FileDescriptorSet: %w", err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return fmt.Errorf("link descriptors: %w", err)
	}
	_, err = io.WriteString(out, wire.Describe(files, pkgs...))
	return err
}

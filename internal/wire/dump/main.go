// Command dump prints the wire description (see package wire) of the engine
// protocols in a FileDescriptorSet read from standard input, such as the one
// `buf build --as-file-descriptor-set -o -` writes. scripts/wire-golden.sh uses
// it to record the engines' own definitions.
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
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "dump:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
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
	_, err = io.WriteString(out, wire.Describe(files, wire.EnginePackages...))
	return err
}

// Command kvgate is the kvgate router and its companion tools in one binary:
//
//	kvgate serve   run the router (with no --worker-urls: two simulated engines in-process)
//	kvgate sim            run a simulated SGLang or vLLM engine
//	kvgate bench          compare routing policies on a workload, or measure router overhead
//	kvgate tokenize       print the token ids of a text, or of a batch of texts
//	kvgate chat-template  render a chat template, or a file of template cases
//
// Run "kvgate <command> -h" for a command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `kvgate: a gRPC-native, cache-aware router for LLM inference fleets.

Usage:
  kvgate serve [flags]   run the router (no --worker-urls: two simulated engines in-process)
  kvgate sim [flags]     run a simulated SGLang, vLLM or TensorRT-LLM engine
  kvgate bench [flags]   compare routing policies on a workload (shared-prefix, multiturn, trace)
  kvgate relay --upstream HOST:PORT
                         forward every gRPC call unchanged (the CPU bench's floor)
  kvgate tokenize --tokenizer PATH [--add-special-tokens] [--batch] TEXT
                         print token ids (with --batch: JSON array in, JSON array out)
  kvgate chat-template --model-path DIR | --template FILE --messages FILE | --cases FILE
                         render a chat template
  kvgate version         print the version, the commit it was built from and the Go release

Run "kvgate <command> -h" for the flags of a command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvgate:", err)
		os.Exit(1)
	}
}

// run dispatches to a subcommand; it returns when ctx ends or the command fails.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], stderr)
	case "sim":
		return runSim(ctx, args[1:], stderr)
	case "bench":
		return runBench(ctx, args[1:], os.Stdout, stderr)
	case "relay":
		return runRelay(ctx, args[1:], stderr)
	case "tokenize":
		return runTokenize(args[1:], os.Stdin, os.Stdout, stderr)
	case "chat-template":
		return runChatTemplate(args[1:], os.Stdout, stderr)
	case "version", "-version", "--version":
		return version(os.Stdout)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stderr, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

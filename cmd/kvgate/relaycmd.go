package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvgate/kvgate/internal/passthrough"
)

// relayConfig is `kvgate relay`: the transparent relay `kvgate bench
// --overhead --cpu` measures the router against.
type relayConfig struct {
	host, upstream string
	port           int
}

func (c *relayConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&c.port, "port", 31100, "port to listen on")
	fs.StringVar(&c.upstream, "upstream", "", "host:port every call is forwarded to (required)")
}

// runRelay forwards every call to --upstream until ctx ends.
func runRelay(ctx context.Context, args []string, stderr io.Writer) error {
	var c relayConfig
	fs := flag.NewFlagSet("kvgate relay", flag.ContinueOnError)
	c.register(fs)
	if err := parseFlags(fs, args, "relay", stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("relay: unexpected arguments %q", fs.Args())
	}
	if c.upstream == "" {
		return errors.New("relay: --upstream is required (host:port of the server to forward to)")
	}
	up, err := grpc.NewClient(c.upstream, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("relay: --upstream %q: %w", c.upstream, err)
	}
	defer up.Close()
	lis, err := net.Listen("tcp", net.JoinHostPort(c.host, strconv.Itoa(c.port)))
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	srv := passthrough.New(up)
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	return srv.Serve(lis)
}

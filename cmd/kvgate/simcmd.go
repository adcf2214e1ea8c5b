package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/kvgate/kvgate/workers/sim"
)

// runSim runs one simulated engine until ctx ends.
func runSim(ctx context.Context, args []string, stderr io.Writer) error {
	cfg := sim.DefaultConfig()
	fs := flag.NewFlagSet("kvgate sim", flag.ContinueOnError)
	host := fs.String("host", "127.0.0.1", "address to serve the engine protocol on")
	port := fs.Int("port", 31000, "port to serve the engine protocol on")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	cfg.RegisterFlags(fs)
	var zf simZMQFlags
	zf.register(fs)
	if err := parseFlags(fs, args, "sim", stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("sim: unexpected arguments %q", fs.Args())
	}
	log, err := newLogger(stderr, *logLevel, false)
	if err != nil {
		return err
	}
	s, err := sim.Start(cfg, net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	log.Info("simulated engine serving", "address", s.Addr(), "protocol", cfg.Protocol, "model", cfg.Model,
		"page_size", cfg.PageSize, "kv_capacity_tokens", cfg.KVCapacityTokens, "time_scale", cfg.TimeScale, "role", cfg.Role, "dp_size", s.Engine().DPSize(), "reply", cfg.Reply)
	if p := s.Engine().BootstrapPort(); p != 0 {
		log.Info("bootstrap endpoint serving", "address", net.JoinHostPort(s.Engine().BootstrapHost(), strconv.Itoa(p)))
	}
	zp, err := zf.start(s, log)
	if err != nil {
		s.Stop()
		return err
	}
	<-ctx.Done()
	if zp != nil {
		zp.Close()
	}
	s.Stop()
	return nil
}

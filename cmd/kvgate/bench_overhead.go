package main

import (
	"context"
	"io"

	"github.com/kvgate/kvgate/bench"
)

// runOverhead runs `kvgate bench --overhead`: the router's added latency and
// its request rate, measured against one zero-latency simulated engine.
// --requests and --concurrency, when given, override the defaults.
func runOverhead(ctx context.Context, c *benchConfig, w io.Writer) error {
	cfg := bench.DefaultOverheadConfig()
	if c.workload.Requests > 0 {
		cfg.Requests = c.workload.Requests
	}
	if c.concurrency > 0 {
		cfg.Concurrency = c.concurrency
	}
	_, err := bench.RunOverhead(ctx, cfg, w)
	return err
}

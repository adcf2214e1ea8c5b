package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/kvgate/kvgate/gateway"
	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/server"
	"github.com/kvgate/kvgate/workers/sim"
)

// SimConfig returns the simulated engine configuration for token-id
// workloads: no tokenizer, Llama-3.1's vocabulary and EOS.
func SimConfig() sim.Config {
	c := sim.DefaultConfig()
	c.TokenizerDir = "none"
	c.VocabSize = VocabSize
	c.EOSTokenID = EOSTokenID
	// Mooncake traces hold prompts up to 191K tokens; the simulated engine has
	// no reason to refuse them.
	c.MaxContextLength = 262144
	return c
}

// Fleet is a router in front of simulated engines, all in this process.
type Fleet struct {
	Addr    string
	Workers int
	g       *gateway.Gateway
	srv     *server.Server
	sims    []*sim.Server
	served  chan error
}

// ParsePolicy splits a policy label such as "cache_aware:smallest_tree" into
// the policy name and its options.
func ParsePolicy(label string) (string, policy.Options, error) {
	opts := policy.DefaultOptions()
	name, variant, hasVariant := strings.Cut(label, ":")
	if !slices.Contains(policy.Names(), name) {
		return "", opts, fmt.Errorf("unknown policy %q (available: %s)", name, strings.Join(policy.Names(), ", "))
	}
	if hasVariant {
		if name != "cache_aware" || (variant != "smallest_tree" && variant != "least_loaded") {
			return "", opts, fmt.Errorf("policy %q: only cache_aware takes a variant (cache_aware:least_loaded or cache_aware:smallest_tree)", label)
		}
		opts.CacheAware.CacheMissFallback = variant
	}
	return name, opts, nil
}

// StartFleet starts n simulated engines with cfg, a registry, the policy named
// by label and a router serving on loopback.
func StartFleet(ctx context.Context, label string, n int, cfg sim.Config) (*Fleet, error) {
	if n < 1 {
		return nil, fmt.Errorf("--workers is %d; at least 1 is needed", n)
	}
	name, opts, err := ParsePolicy(label)
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.DiscardHandler)
	f := &Fleet{Workers: n}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	gcfg := gateway.DefaultConfig()
	gcfg.Policy, gcfg.Options = name, opts
	gcfg.LoadPollInterval = 100 * time.Millisecond
	gcfg.Logger = log
	for i := range n {
		c := cfg
		c.Logger = log
		s, err := sim.Start(c, "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("start simulated engine %d: %w", i, err)
		}
		f.sims = append(f.sims, s)
		gcfg.WorkerURLs = append(gcfg.WorkerURLs, "grpc://"+s.Addr())
	}
	if f.g, err = gateway.New(ctx, gcfg); err != nil {
		return nil, err
	}
	f.srv = f.g.Server
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f.Addr = lis.Addr().String()
	f.served = make(chan error, 1)
	go func() { f.served <- f.g.Serve(lis) }()
	ok = true
	return f, nil
}

// PredictionExact reads the router's prediction counters: the share of
// completed requests whose predicted cached tokens equalled the engine's
// report, or NaN when nothing was predicted (cache-blind policies).
func (f *Fleet) PredictionExact() float64 {
	mfs, err := f.srv.Metrics().Registry.Gather()
	if err != nil {
		return math.NaN()
	}
	var exact, obs float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "kvgate_cache_prediction_exact_total":
				exact += m.GetCounter().GetValue()
			case "kvgate_cache_prediction_observations_total":
				obs += m.GetCounter().GetValue()
			}
		}
	}
	if obs == 0 {
		return math.NaN()
	}
	return exact / obs
}

// Close stops the router, its background loops and the engines.
func (f *Fleet) Close() error {
	if f.g != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		f.g.Shutdown(ctx)
		cancel()
	}
	for _, s := range f.sims {
		s.Stop()
	}
	return nil
}

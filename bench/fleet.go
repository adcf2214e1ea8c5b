package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/server"
	"github.com/kvgate/kvgate/workers"
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
	srv     *server.Server
	sims    []*sim.Server
	reg     *workers.Registry
	stop    context.CancelFunc
	wg      sync.WaitGroup
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
		opts.CacheMissFallback = variant
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
	pol, err := policy.New(name, opts)
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.DiscardHandler)
	f := &Fleet{reg: workers.NewRegistry(), Workers: n}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	for i := range n {
		c := cfg
		c.Logger = log
		s, err := sim.Start(c, "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("start simulated engine %d: %w", i, err)
		}
		f.sims = append(f.sims, s)
		w, err := workers.Connect(ctx, s.Addr(), workers.ConnectOptions{})
		if err != nil {
			return nil, fmt.Errorf("connect to simulated engine %d: %w", i, err)
		}
		if err := f.reg.Add(w); err != nil {
			w.Close()
			return nil, err
		}
	}
	if f.srv, err = server.New(server.Config{Registry: f.reg, Policy: pol, Logger: log}); err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f.Addr = lis.Addr().String()
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	f.stop = stop
	if r, isRunner := pol.(policy.Runner); isRunner {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			r.Run(bg)
		}()
	}
	f.wg.Add(2)
	go func() {
		defer f.wg.Done()
		workers.RunLoadPolls(bg, f.reg, 100*time.Millisecond, log)
	}()
	go func() {
		defer f.wg.Done()
		_ = f.srv.Serve(lis)
	}()
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
	if f.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		f.srv.Stop(ctx)
		cancel()
	}
	if f.stop != nil {
		f.stop()
	}
	f.wg.Wait()
	err := f.reg.Close()
	for _, s := range f.sims {
		s.Stop()
	}
	return errors.Join(err)
}

package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/router"
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

// Testbed is simulated engines with one or more routers in front of them, all
// in this process. Several routers stand for replicas of kvgate behind a
// client-side or L4 balancer: each has its own registry, policy state and
// metrics, and they share nothing but the engines, as replicas in production
// do.
type Testbed struct {
	// Addr is the first router's address: with one router, the router.
	Addr string
	// Addrs are the routers' addresses, one per replica, in order.
	Addrs   []string
	Workers int

	// Config is what every router was built from (after the tune
	// functions), so a caller can check what was measured.
	Config router.Config

	routers []*router.Router
	sims    []*sim.Process
	serving sync.WaitGroup // the routers' Serve calls
}

// Pooled labels the pooled reference run: one simulated engine with the
// whole fleet's KV capacity, prefill rate and batch (see PooledSim), behind
// a router. No routing can do better than a fleet that is one engine: it
// holds every prefix once, in a cache as large as all of theirs, and never
// queues a request behind one engine while another idles.
const Pooled = "pooled"

// PooledSim returns cfg scaled to stand for n engines pooled into one: n
// times the KV capacity, prefill throughput and running requests, and a
// decode step that grows per running request n times more slowly (a batch n
// times larger costs what each engine's share of it costs). The unlimited
// cache of the oracle ignores capacity; this reference keeps it, and
// replays the workload through the same latency model.
func PooledSim(cfg sim.Config, n int) sim.Config {
	cfg.KVCapacityTokens *= n
	cfg.PrefillTokensPerSec *= float64(n)
	cfg.MaxRunning *= n
	cfg.DecodeMsPerRunning /= float64(n)
	return cfg
}

// ParsePolicy splits a policy label such as "cache_aware:smallest_tree",
// "cache_aware:cost:smallest_tree", "cache_aware:wait:u0.5" or
// "vllm_cache_aware:position" into the policy name and its options. Pooled
// is round_robin (over its one engine).
func ParsePolicy(label string) (string, policy.Options, error) {
	opts := policy.DefaultOptions()
	if label == Pooled {
		return "round_robin", opts, nil
	}
	name, variants, hasVariant := strings.Cut(label, ":")
	if !slices.Contains(policy.Names(), name) {
		return "", opts, fmt.Errorf("unknown policy %q (available: %s, and %s, the pooled reference)", name, strings.Join(policy.Names(), ", "), Pooled)
	}
	if !hasVariant {
		return name, opts, nil
	}
	for _, variant := range strings.Split(variants, ":") {
		// u<weight> and s<weight>: the wait mode's
		// --cache-aware-uneven-weight and --cache-aware-step-weight, so
		// weights compare in one run.
		if w, ok := waitWeight(name, variant, "u"); ok {
			opts.CacheAware.UnevenWeight, opts.VllmCacheAware.UnevenWeight = w, w
			continue
		}
		if w, ok := waitWeight(name, variant, "s"); ok {
			opts.CacheAware.StepWeight, opts.VllmCacheAware.StepWeight = w, w
			continue
		}
		switch {
		case name == "cache_aware" && (variant == policy.FallbackSmallestTree || variant == policy.FallbackLeastLoaded):
			opts.CacheAware.CacheMissFallback = variant
		case name == "cache_aware" && (variant == policy.ModeThreshold || variant == policy.ModeCost || variant == policy.ModeWait):
			opts.CacheAware.Mode = variant
		case name == "vllm_cache_aware" && (variant == "chained" || variant == "position"):
			opts.VllmCacheAware.BlockHash = variant
		case name == "vllm_cache_aware" && (variant == policy.ModeThreshold || variant == policy.ModeCost || variant == policy.ModeWait):
			opts.VllmCacheAware.Mode = variant
		default:
			return "", opts, fmt.Errorf("policy %q: only cache_aware (:least_loaded, :smallest_tree, :threshold, :cost, :wait) and vllm_cache_aware (:chained, :position, :threshold, :cost, :wait) take variants, and both u<weight>, the wait mode's uneven weight", label)
		}
	}
	return name, opts, nil
}

// waitWeight reads a variant of a cache-aware policy that is prefix and a
// number.
func waitWeight(name, variant, prefix string) (float64, bool) {
	rest, ok := strings.CutPrefix(variant, prefix)
	if !ok || !strings.HasSuffix(name, "cache_aware") {
		return 0, false
	}
	w, err := strconv.ParseFloat(rest, 64)
	return w, err == nil
}

// StartTestbed starts n simulated engines with cfg, a registry, the policy named
// by label and a router serving on loopback.
func StartTestbed(ctx context.Context, label string, n int, cfg sim.Config, tune ...func(*router.Config)) (*Testbed, error) {
	return StartReplicatedTestbed(ctx, label, n, 1, cfg, tune...)
}

// StartReplicatedTestbed starts n simulated engines with cfg and routers
// replicas of the router in front of them, each built by router.New from the
// same configuration (the policy named by label, then each tune function:
// kvgate bench's router flags) and serving on a loopback listener of its
// own.
func StartReplicatedTestbed(ctx context.Context, label string, n, routers int, cfg sim.Config, tune ...func(*router.Config)) (*Testbed, error) {
	if n < 1 {
		return nil, fmt.Errorf("--workers is %d; at least 1 is needed", n)
	}
	if routers < 1 {
		return nil, fmt.Errorf("--routers has %d; every count must be at least 1", routers)
	}
	name, opts, err := ParsePolicy(label)
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.DiscardHandler)
	f := &Testbed{Workers: n}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	gcfg := router.DefaultConfig()
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
	for _, t := range tune {
		if t != nil {
			t(&gcfg)
		}
	}
	f.Config = gcfg
	for i := range routers {
		g, err := router.New(ctx, gcfg)
		if err != nil {
			return nil, fmt.Errorf("router %d: %w", i, err)
		}
		f.routers = append(f.routers, g)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("router %d: %w", i, err)
		}
		f.Addrs = append(f.Addrs, lis.Addr().String())
		f.serving.Go(func() { g.Serve(lis) })
	}
	f.Addr = f.Addrs[0]
	ok = true
	return f, nil
}

// counter sums the counter family name over its labels, router by router,
// in the order of Addrs; a router whose registry cannot be read counts 0.
func (f *Testbed) counter(name string) []float64 {
	sums := make([]float64, len(f.routers))
	for i, g := range f.routers {
		mfs, err := g.Server.Metrics().Registry.Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				sums[i] += m.GetCounter().GetValue()
			}
		}
	}
	return sums
}

// PredictionExact reads the routers' prediction counters: the share of
// completed requests whose predicted cached tokens equalled the engine's
// report, over all replicas, or NaN when nothing was predicted (cache-blind
// policies).
func (f *Testbed) PredictionExact() float64 {
	var exact, obs float64
	for _, v := range f.counter("kvgate_cache_prediction_exact_total") {
		exact += v
	}
	for _, v := range f.counter("kvgate_cache_prediction_observations_total") {
		obs += v
	}
	if obs == 0 {
		return math.NaN()
	}
	return exact / obs
}

// RouterRequests returns the RPCs each router has handled
// (kvgate_requests_total, every method and status), one count per replica in
// the order of Addrs: what reached each replica by its own account.
func (f *Testbed) RouterRequests() []int {
	sums := f.counter("kvgate_requests_total")
	counts := make([]int, len(sums))
	for i, v := range sums {
		counts[i] = int(v)
	}
	return counts
}

// Close stops every router (letting running requests finish for up to five
// seconds each), waits for their Serve calls to return, then stops the
// engines.
func (f *Testbed) Close() error {
	for _, g := range f.routers {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		g.Shutdown(ctx)
		cancel()
	}
	f.serving.Wait()
	for _, s := range f.sims {
		s.Stop()
	}
	return nil
}

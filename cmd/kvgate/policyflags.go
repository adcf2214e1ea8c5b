package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/kvgate/kvgate/policy"
)

// policyFlags are SMG's routing flags, with their names, units and
// defaults. Every flag is registered with the value it stands for, and any
// value given is used as given: 0 is a value, never "the default", and
// policy.New refuses one out of range with a message naming the flag.
//
// Three flags serve two policies whose SMG defaults differ: the balance
// thresholds (cache_aware 64 / 1.5, bucket 32 / 1.0001) and the eviction
// interval (cache_aware 120 s, manual 60 s). They are registered with
// cache_aware's default; when not given on the command line, the other
// policy keeps its own.
type policyFlags struct {
	fs *flag.FlagSet // to tell which flags were given

	cacheThreshold       float64
	balanceAbs           int
	balanceRel           float64
	balanceCapacity      float64
	cacheMissFallback    string
	evictionIntervalSecs int
	maxTreeSize          int
	evictionPolicy       string
	blockSize            int
	speculativeTTLMs     int
	cacheAwareMode       string
	decodeWeight         float64
	evictWeight          float64
	fleetWeight          float64
	unevenWeight         float64
	stepWeight           float64
	prefixTokenCount     int
	prefixHashLoadFactor float64
	assignmentMode       string
	maxIdleSecs          int
	manualMaxKeys        int
	bucketAdjustSecs     int

	vllmBlockSize      int
	vllmMaxBlocks      int
	vllmEvictionSecs   int
	vllmCacheThreshold float64
	vllmLoadFactor     float64
	vllmBlockHash      string
}

func (p *policyFlags) register(fs *flag.FlagSet) {
	p.fs = fs
	d := policy.DefaultOptions()
	ca, ph, m, b, v := d.CacheAware, d.PrefixHash, d.Manual, d.Bucket, d.VllmCacheAware
	fs.Float64Var(&p.cacheThreshold, "cache-threshold", ca.CacheThreshold,
		"cache_aware with --cache-aware-mode threshold: route by cache when the longest match covers at least this share of the prompt, in [0, 1] (0: whenever any page matches)")
	fs.IntVar(&p.balanceAbs, "balance-abs-threshold", ca.BalanceAbsThreshold,
		fmt.Sprintf("cache_aware with --cache-aware-mode threshold, bucket: load difference (max - min) above which the fleet counts as imbalanced, ≥ 0 (bucket's default when not given: %d); cache_aware counts a smaller difference while the fleet's mean load is under half of it: twice the mean, but not less than half the threshold", b.BalanceAbsThreshold))
	fs.Float64Var(&p.balanceRel, "balance-rel-threshold", ca.BalanceRelThreshold,
		fmt.Sprintf("cache_aware with --cache-aware-mode threshold, bucket: load ratio (max / min) above which the fleet counts as imbalanced, ≥ 1 (bucket's default when not given: %g)", b.BalanceRelThreshold))
	fs.Float64Var(&p.balanceCapacity, "balance-capacity-threshold", ca.BalanceCapacityThreshold,
		"cache_aware with --cache-aware-mode threshold: where every engine reports how many requests it runs at once, the fleet also counts as imbalanced when the loads as shares of those limits differ by at least this much (1: one engine's worth) and by more than --balance-rel-threshold ×, and, while a worker is idle and holds nothing, once any worker carries two requests; ≥ 0, 0 turns it off (where an engine reports no limit, --balance-abs-threshold alone judges)")
	fs.StringVar(&p.cacheMissFallback, "cache-miss-fallback", ca.CacheMissFallback,
		"cache_aware with --cache-aware-mode threshold: where a cache miss goes: least_loaded or smallest_tree (the worker with the most cache capacity, SMG's rule)")
	fs.IntVar(&p.evictionIntervalSecs, "eviction-interval", int(ca.EvictionInterval/time.Second),
		fmt.Sprintf("cache_aware: seconds between periodic tree evictions (the budget holds without them); manual: between idle-key checks; ≥ 1 (manual's default when not given: %d)", int(m.EvictionInterval/time.Second)))
	fs.IntVar(&p.maxTreeSize, "max-tree-size", ca.MaxTreeSize,
		"cache_aware: routing tree budget in tokens, held after every insert; at least one page (--block-size)")
	fs.StringVar(&p.evictionPolicy, "eviction-policy", ca.EvictionPolicy,
		"cache_aware: tree eviction order: lru, lfu, fifo, mru, filo, priority")
	fs.IntVar(&p.blockSize, "block-size", 0,
		fmt.Sprintf("cache_aware: tree page size in tokens, ≥ 1; 0 (the default) means the workers' KV page size where they report it, else %d", ca.BlockSize))
	fs.IntVar(&p.speculativeTTLMs, "speculative-ttl-ms", int(ca.SpeculativeTTL/time.Millisecond),
		"cache_aware, workers with KV events: how long after a request ends the pages its routing decision expected on the worker stay in the tree unless an event confirmed them, ≥ 0")
	fs.StringVar(&p.cacheAwareMode, "cache-aware-mode", ca.Mode,
		"cache_aware, vllm_cache_aware: selection rule: threshold (cache_aware: the longest match over --cache-threshold unless the fleet is imbalanced; vllm_cache_aware: SMG's --vllm-cache-threshold and --vllm-load-factor) cost (the worker where prefill of the uncached part + the prefill this router has queued there + --cache-aware-decode-weight × the KV its running requests hold is least) or wait (the worker where the first token is expected soonest: the wait for a running slot or the prefill queued there, then the prompt's uncached part, at the engine's measured speed, and --cache-aware-step-weight decode steps at its batch, plus, when no engine could start the request at once, --cache-aware-fleet-weight × that prefill)")
	fs.Float64Var(&p.fleetWeight, "cache-aware-fleet-weight", ca.FleetWeight,
		"cache_aware, vllm_cache_aware with --cache-aware-mode wait: the seconds of wait charged for each second of prefill a request adds to the fleet (later requests wait for it), scaled by the soonest any engine could start the request over its whole prompt's prefill time (at most 1), ≥ 0")
	fs.Float64Var(&p.unevenWeight, "cache-aware-uneven-weight", ca.UnevenWeight,
		"cache_aware, vllm_cache_aware with --cache-aware-mode wait: the seconds of wait charged for each second an engine's wait before it could start the request exceeds the shortest such wait in the fleet (a longer lane delays every later request sent there), scaled as --cache-aware-fleet-weight is, ≥ 0")
	fs.Float64Var(&p.stepWeight, "cache-aware-step-weight", ca.StepWeight,
		"cache_aware, vllm_cache_aware with --cache-aware-mode wait: the decode steps charged for the wait before a request's first token on an engine that is decoding (the running step, then the one carrying its prefill), each step as long as the engine's measured step at its batch with the request added, and, while above 0, the time its decode adds to the requests running beside it (in full where one more request lengthens a lone request's step by 10% or more, in proportion below), ≥ 0; 0: the batch is not priced (see BENCHMARKS.md, \"The decode step priced\")")
	fs.Float64Var(&p.decodeWeight, "cache-aware-decode-weight", ca.DecodeWeight,
		"cache_aware, vllm_cache_aware with --cache-aware-mode cost: weight of a worker's KV tokens held by running requests against prompt tokens to prefill, ≥ 0")
	fs.Float64Var(&p.evictWeight, "cache-aware-evict-weight", ca.EvictWeight,
		"cache_aware, vllm_cache_aware with --cache-aware-mode cost: weight of the cached tokens a prompt's new pages push out of a full cache (later prefills each costs) against prompt tokens to prefill, ≥ 0")
	fs.IntVar(&p.prefixTokenCount, "prefix-token-count", ph.TokenCount,
		"prefix_hash: leading tokens hashed, ≥ 1")
	fs.Float64Var(&p.prefixHashLoadFactor, "prefix-hash-load-factor", ph.LoadFactor,
		"prefix_hash: skip an owner whose load exceeds this factor times the average, ≥ 1")
	fs.StringVar(&p.assignmentMode, "assignment-mode", m.AssignmentMode,
		"manual: how a new routing key picks its worker: random, min_load, min_group")
	fs.IntVar(&p.maxIdleSecs, "max-idle-secs", int(m.MaxIdle/time.Second),
		"manual: seconds an unused routing key is remembered, ≥ 1")
	fs.IntVar(&p.manualMaxKeys, "manual-max-keys", m.MaxKeys,
		"manual: most routing keys remembered at once (least recently used forgotten first), ≥ 1; about 130 bytes each")
	fs.IntVar(&p.bucketAdjustSecs, "bucket-adjust-interval-secs", int(b.AdjustInterval/time.Second),
		"bucket: seconds between boundary adjustments, ≥ 1")
	fs.IntVar(&p.vllmBlockSize, "vllm-block-size", v.BlockSize,
		"vllm_cache_aware: tokens per KV block, ≥ 1; unless given, the block size the engines report (16 where they report none); given, it must match the vLLM engines' --block-size")
	fs.IntVar(&p.vllmMaxBlocks, "vllm-max-blocks-per-backend", v.MaxBlocksPerBackend,
		"vllm_cache_aware: blocks tracked per worker (least recently used evicted first), ≥ 1; about 40 bytes each")
	fs.IntVar(&p.vllmEvictionSecs, "vllm-eviction-interval-secs", int(v.EvictionInterval/time.Second),
		"vllm_cache_aware: seconds between evictions down to --vllm-max-blocks-per-backend, ≥ 0 (0: none; recording still keeps each worker within a quarter over)")
	fs.Float64Var(&p.vllmCacheThreshold, "vllm-cache-threshold", v.CacheThreshold,
		"vllm_cache_aware with --cache-aware-mode threshold: route by cache when the matched share of the prompt's whole blocks is above this, in [0, 1]")
	fs.Float64Var(&p.vllmLoadFactor, "vllm-load-factor", v.LoadFactor,
		"vllm_cache_aware with --cache-aware-mode threshold: skip the cached worker when its load is not below this factor times the average (unless it is the least loaded), ≥ 1; where every engine reports its running-request limit, keep it below that limit while its load is at most twice the average and one more, and, while an engine is idle and holds no block, only while it carries at most one request")
	fs.StringVar(&p.vllmBlockHash, "vllm-block-hash", v.BlockHash,
		"vllm_cache_aware: block keys: chained (each names its whole prefix) or position (SMG's; over-predicts when prompts share a block at the same position after differing)")
}

// given reports whether flag name was set on the command line.
func (p *policyFlags) given(name string) bool {
	found := false
	if p.fs != nil {
		p.fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	}
	return found
}

// validate checks every policy's settings, not only the chosen policy's, and
// before anything starts: a value out of range is a mistake on the command
// line whichever policy it was meant for, and refusing it only once the
// workers have joined (when the policy is built) would hide it behind a
// start-up that looked fine.
func (p *policyFlags) validate() error {
	o := p.options()
	// The two cache-aware policies share --cache-aware-mode and its
	// weight: vllm_cache_aware's are checked with cache_aware's, once.
	v := o.VllmCacheAware
	v.Mode, v.DecodeWeight, v.EvictWeight, v.FleetWeight = policy.ModeThreshold, 0, 0, 0
	return errors.Join(o.CacheAware.Validate(), o.PrefixHash.Validate(), o.Manual.Validate(),
		o.Bucket.Validate(), v.Validate())
}

// options turns the flags into policy options; the tree's page size comes
// from the workers unless --block-size is given. policy.New validates them.
func (p *policyFlags) options() policy.Options {
	o := policy.DefaultOptions()
	secs := func(n int) time.Duration { return time.Duration(n) * time.Second }

	ca := &o.CacheAware
	ca.CacheThreshold = p.cacheThreshold
	ca.BalanceAbsThreshold = p.balanceAbs
	ca.BalanceRelThreshold = p.balanceRel
	ca.BalanceCapacityThreshold = p.balanceCapacity
	ca.CacheMissFallback = p.cacheMissFallback
	ca.EvictionInterval = secs(p.evictionIntervalSecs)
	ca.MaxTreeSize = p.maxTreeSize
	ca.EvictionPolicy = p.evictionPolicy
	ca.BlockSize = p.blockSize
	ca.SpeculativeTTL = time.Duration(p.speculativeTTLMs) * time.Millisecond
	ca.Mode, ca.DecodeWeight, ca.EvictWeight, ca.FleetWeight = p.cacheAwareMode, p.decodeWeight, p.evictWeight, p.fleetWeight
	ca.UnevenWeight, ca.StepWeight = p.unevenWeight, p.stepWeight
	if ca.BlockSize == 0 {
		// The router learns it from the workers (LearnBlockSize); until
		// then the default keeps the options valid.
		ca.BlockSize = policy.DefaultCacheAwareConfig().BlockSize
	}

	o.PrefixHash.TokenCount = p.prefixTokenCount
	o.PrefixHash.LoadFactor = p.prefixHashLoadFactor

	o.Manual.AssignmentMode = p.assignmentMode
	o.Manual.MaxIdle = secs(p.maxIdleSecs)
	o.Manual.MaxKeys = p.manualMaxKeys
	if p.given("eviction-interval") {
		o.Manual.EvictionInterval = secs(p.evictionIntervalSecs)
	}

	o.Bucket.AdjustInterval = secs(p.bucketAdjustSecs)
	if p.given("balance-abs-threshold") {
		o.Bucket.BalanceAbsThreshold = p.balanceAbs
	}
	if p.given("balance-rel-threshold") {
		o.Bucket.BalanceRelThreshold = p.balanceRel
	}

	v := &o.VllmCacheAware
	v.BlockSize = p.vllmBlockSize
	v.MaxBlocksPerBackend = p.vllmMaxBlocks
	v.EvictionInterval = secs(p.vllmEvictionSecs)
	v.CacheThreshold = p.vllmCacheThreshold
	v.LoadFactor = p.vllmLoadFactor
	v.BlockHash = p.vllmBlockHash
	v.Mode, v.DecodeWeight, v.EvictWeight, v.FleetWeight = p.cacheAwareMode, p.decodeWeight, p.evictWeight, p.fleetWeight
	v.UnevenWeight, v.StepWeight = p.unevenWeight, p.stepWeight
	return o
}

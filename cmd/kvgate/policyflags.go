package main

import (
	"flag"
	"time"

	"github.com/kvgate/kvgate/policy"
)

// policyFlags are the seeds' routing flags, with their names, units and
// defaults. A zero value leaves the policy's own default in place, because
// defaults differ between policies (balance thresholds: cache_aware 64/1.5,
// bucket 32/1.0001; eviction interval: cache_aware 120 s, manual 60 s).
type policyFlags struct {
	cacheThreshold       float64
	balanceAbs           int
	balanceRel           float64
	cacheMissFallback    string
	evictionIntervalSecs int
	maxTreeSize          int
	evictionPolicy       string
	blockSize            int
	prefixTokenCount     int
	prefixHashLoadFactor float64
	assignmentMode       string
	maxIdleSecs          int
	bucketAdjustSecs     int
}

func (p *policyFlags) register(fs *flag.FlagSet) {
	d := policy.DefaultOptions()
	fs.Float64Var(&p.cacheThreshold, "cache-threshold", d.CacheThreshold, "cache_aware: minimum prefix match ratio (0.0-1.0) to route by cache")
	fs.IntVar(&p.balanceAbs, "balance-abs-threshold", 0, "cache_aware, bucket: load difference (max - min) above which the fleet counts as imbalanced (0: the policy's default, 64; bucket 32)")
	fs.Float64Var(&p.balanceRel, "balance-rel-threshold", 0, "cache_aware, bucket: load ratio (max / min) above which the fleet counts as imbalanced (0: the policy's default, 1.5; bucket 1.0001)")
	fs.StringVar(&p.cacheMissFallback, "cache-miss-fallback", d.CacheMissFallback, "cache_aware: where a cache miss goes: least_loaded or smallest_tree (the seed's most cache capacity)")
	fs.IntVar(&p.evictionIntervalSecs, "eviction-interval", 0, "cache_aware: seconds between tree evictions; manual: between idle-key checks (0: the policy's default, 120; manual 60)")
	fs.IntVar(&p.maxTreeSize, "max-tree-size", d.MaxTreeSize, "cache_aware: routing tree budget in tokens")
	fs.StringVar(&p.evictionPolicy, "eviction-policy", d.EvictionPolicy, "cache_aware: tree eviction order: lru, lfu, fifo, mru, filo, priority")
	fs.IntVar(&p.blockSize, "block-size", 0, "cache_aware: tree page size in tokens (0: the workers' KV page size where they report it, else 16)")
	fs.IntVar(&p.prefixTokenCount, "prefix-token-count", d.PrefixTokenCount, "prefix_hash: leading tokens hashed")
	fs.Float64Var(&p.prefixHashLoadFactor, "prefix-hash-load-factor", d.PrefixHashLoadFactor, "prefix_hash: skip an owner whose load exceeds this factor times the average")
	fs.StringVar(&p.assignmentMode, "assignment-mode", d.AssignmentMode, "manual: how a new routing key picks its worker: random, min_load, min_group")
	fs.IntVar(&p.maxIdleSecs, "max-idle-secs", int(d.MaxIdle/time.Second), "manual: seconds an unused routing key is remembered")
	fs.IntVar(&p.bucketAdjustSecs, "bucket-adjust-interval-secs", int(d.BucketAdjustInterval/time.Second), "bucket: seconds between boundary adjustments")
}

// options turns the flags into policy options; the tree's page size comes
// from the workers unless --block-size is given.
func (p *policyFlags) options() policy.Options {
	o := policy.DefaultOptions()
	o.CacheThreshold = p.cacheThreshold
	o.BalanceAbsThreshold = p.balanceAbs
	o.BalanceRelThreshold = p.balanceRel
	o.CacheMissFallback = p.cacheMissFallback
	o.EvictionInterval = time.Duration(p.evictionIntervalSecs) * time.Second
	o.MaxTreeSize = p.maxTreeSize
	o.EvictionPolicy = p.evictionPolicy
	o.BlockSize = p.blockSize
	o.PrefixTokenCount = p.prefixTokenCount
	o.PrefixHashLoadFactor = p.prefixHashLoadFactor
	o.AssignmentMode = p.assignmentMode
	o.MaxIdle = time.Duration(p.maxIdleSecs) * time.Second
	o.BucketAdjustInterval = time.Duration(p.bucketAdjustSecs) * time.Second
	return o
}

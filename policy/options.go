package policy

import "time"

// Options configures the policies built by New. A zero field means the
// policy's own default (the seeds' defaults; see DefaultOptions), so that one
// Options value can serve every policy even where their defaults differ, as
// the balance thresholds of cache_aware (64 / 1.5) and bucket (32 / 1.0001) do.
type Options struct {
	// Intn is the random source; nil means math/rand/v2's IntN.
	Intn Intn
	// Now is the clock for idle expiry and intervals; nil means time.Now.
	Now func() time.Time

	// cache_aware: route to the longest prefix match when it covers at least
	// CacheThreshold of the prompt, unless the fleet is imbalanced:
	// max_load - min_load > BalanceAbsThreshold and
	// max_load > BalanceRelThreshold × min_load.
	CacheThreshold      float64
	BalanceAbsThreshold int
	BalanceRelThreshold float64
	// CacheMissFallback is where a cache miss goes: "least_loaded" or
	// "smallest_tree" (the seed's "most cache capacity").
	CacheMissFallback string
	// EvictionInterval is the time between tree evictions (manual: idle key
	// checks).
	EvictionInterval time.Duration
	// MaxTreeSize is the tree's budget, in tokens.
	MaxTreeSize int
	// EvictionPolicy orders eviction: lru, lfu, fifo, mru, filo or priority.
	EvictionPolicy string
	// BlockSize is the tree's page size in tokens; 0: 16.
	BlockSize int

	// prefix_hash: hash the first PrefixTokenCount tokens; skip an owner
	// loaded above PrefixHashLoadFactor × the average.
	PrefixTokenCount     int
	PrefixHashLoadFactor float64

	// manual: how a new routing key picks its worker (random, min_load,
	// min_group), and how long an idle key is remembered.
	AssignmentMode string
	MaxIdle        time.Duration

	// bucket: time between boundary adjustments.
	BucketAdjustInterval time.Duration
}

// DefaultOptions returns the seeds' defaults for every policy but bucket's
// balance thresholds, which the bucket policy applies itself when
// BalanceAbsThreshold and BalanceRelThreshold are zero.
func DefaultOptions() Options {
	return Options{
		CacheThreshold:       0.3,
		BalanceAbsThreshold:  64,
		BalanceRelThreshold:  1.5,
		CacheMissFallback:    "least_loaded",
		EvictionInterval:     120 * time.Second,
		MaxTreeSize:          67108864,
		EvictionPolicy:       "lru",
		BlockSize:            16,
		PrefixTokenCount:     256,
		PrefixHashLoadFactor: 1.25,
		AssignmentMode:       "random",
		MaxIdle:              14400 * time.Second,
		BucketAdjustInterval: 5 * time.Second,
	}
}

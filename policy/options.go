package policy

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/kvgate/kvgate/tree"
)

// Options configures the policies built by New: one small config per policy
// that has settings, each with its own defaults (DefaultOptions) and its own
// Validate. Zero is a value, never "the default": a config starts from
// DefaultOptions and the caller changes what it means to change, so that
// --cache-threshold 0 means 0. New validates the config of the policy it
// builds and returns the error, which names the flag and its allowed range.
type Options struct {
	// Intn is the random source; nil means math/rand/v2's IntN.
	Intn Intn
	// Now is the clock for idle expiry; nil means time.Now.
	Now func() time.Time
	// Logger receives what policies have to say (unusable KV events); nil
	// means slog.Default().
	Logger *slog.Logger

	CacheAware     CacheAwareConfig
	PrefixHash     PrefixHashConfig
	Manual         ManualConfig
	Bucket         BucketConfig
	VllmCacheAware VllmCacheAwareConfig
}

// DefaultOptions returns every policy's defaults: SMG's values, plus
// the bounds SMG lacks (ManualConfig.MaxKeys).
func DefaultOptions() Options {
	return Options{
		CacheAware:     DefaultCacheAwareConfig(),
		PrefixHash:     DefaultPrefixHashConfig(),
		Manual:         DefaultManualConfig(),
		Bucket:         DefaultBucketConfig(),
		VllmCacheAware: DefaultVllmCacheAwareConfig(),
	}
}

// CacheAwareConfig configures cache_aware: route to the longest prefix match
// when it covers at least CacheThreshold of the prompt, unless the fleet is
// imbalanced: max_load - min_load > gap and max_load > BalanceRelThreshold ×
// min_load, where gap is twice the fleet's mean load kept within
// [BalanceAbsThreshold/2, BalanceAbsThreshold]; or, where every engine
// reports its running-request limit, when the loads as shares of those
// limits differ by BalanceCapacityThreshold or more.
type CacheAwareConfig struct {
	// CacheThreshold (--cache-threshold) is in [0, 1]; 0 routes by cache
	// whenever any worker holds a page of the prompt, 1 only on a full
	// match.
	CacheThreshold float64
	// BalanceAbsThreshold (--balance-abs-threshold) is ≥ 0: the load
	// difference past which the fleet is imbalanced at any load; while the
	// mean load is under half of it, the difference that counts is twice
	// the mean, but never less than half of this.
	BalanceAbsThreshold int
	// BalanceRelThreshold (--balance-rel-threshold) is ≥ 1: max_load is never
	// below min_load, so a ratio under 1 would mean the same as 1.
	BalanceRelThreshold float64
	// BalanceCapacityThreshold (--balance-capacity-threshold) is ≥ 0 and
	// finite: the difference in load, as a share of each engine's
	// running-request limit, from which the fleet is imbalanced (1: one
	// engine's worth of requests). It applies only where every candidate
	// reports its limit; 0 turns it off, leaving the absolute rule alone.
	BalanceCapacityThreshold float64
	// CacheMissFallback (--cache-miss-fallback) is where a cache miss goes:
	// FallbackLeastLoaded or FallbackSmallestTree.
	CacheMissFallback string
	// EvictionInterval (--eviction-interval) is the time between periodic
	// tree evictions; > 0. The budget holds without them (inserts evict);
	// they only let an idle tree decay.
	EvictionInterval time.Duration
	// MaxTreeSize (--max-tree-size) is the tree's budget in stored tokens,
	// at least one page (BlockSize): the tree is always bounded, so 0 (which
	// would mean unbounded to the tree) is refused.
	MaxTreeSize int
	// EvictionPolicy (--eviction-policy) orders eviction: lru, lfu, fifo,
	// mru, filo or priority.
	EvictionPolicy string
	// BlockSize (--block-size) is the tree's page size in tokens; ≥ 1.
	BlockSize int
	// SpeculativeTTL (--speculative-ttl-ms) is how long after a request
	// ends the pages its routing decision inserted for a worker with KV
	// events stay in the tree unless an event confirms them; ≥ 0. It covers
	// the events still on their way when the request ends.
	SpeculativeTTL time.Duration
	// Mode (--cache-aware-mode) is the selection rule: ModeThreshold (the
	// threshold and balance rules above), ModeCost (the least cost; see
	// costModel) or ModeWait (the least expected wait for the first token;
	// see waitModel). In ModeCost and ModeWait the threshold and balance
	// settings are unused.
	Mode string
	// DecodeWeight (--cache-aware-decode-weight) is, in ModeCost, the
	// weight of a worker's held KV tokens against prompt tokens to
	// prefill; ≥ 0 and finite.
	DecodeWeight float64
	// EvictWeight (--cache-aware-evict-weight) is, in ModeCost, the
	// weight of the cached tokens a prompt's new pages push out of a full
	// cache; ≥ 0 and finite.
	EvictWeight float64
	// FleetWeight (--cache-aware-fleet-weight) is, in ModeWait, the
	// charge at full fleet pressure for each second of prefill a request
	// adds, in seconds of wait; ≥ 0 and finite (see waitModel).
	FleetWeight float64
	// UnevenWeight (--cache-aware-uneven-weight) is, in ModeWait, the
	// charge at full fleet pressure for each second a candidate's start
	// wait exceeds the fleet's soonest, in seconds of wait; ≥ 0 and finite
	// (see waitModel).
	UnevenWeight float64
	// StepWeight (--cache-aware-step-weight) is, in ModeWait, the charge
	// in decode steps of the candidate's engine, at its batch with the
	// request added, for the steps the request waits for before its first
	// token; above 0 it also charges what the request slows beside it.
	// ≥ 0 and finite (see waitModel).
	StepWeight float64
}

// DefaultCacheAwareConfig returns SMG's cache_aware settings.
func DefaultCacheAwareConfig() CacheAwareConfig {
	return CacheAwareConfig{
		CacheThreshold:      0.3,
		BalanceAbsThreshold: 64,
		BalanceRelThreshold: 1.5,
		// Not SMG's: SMG judges balance by request counts alone. Where
		// engines report no limit, this is unused and the rule is SMG's.
		BalanceCapacityThreshold: 1,
		CacheMissFallback:        FallbackLeastLoaded,
		EvictionInterval:         120 * time.Second,
		MaxTreeSize:              1 << 26,
		EvictionPolicy:           "lru",
		BlockSize:                16,
		SpeculativeTTL:           500 * time.Millisecond,
		// The wait mode: on both Mooncake traces it leads the threshold
		// rule at the loads where a router's choice matters, and is level
		// with it on engines of 2, 8 and 256 slots and on make bench's
		// workloads (BENCHMARKS.md, "The wait mode the default").
		// Earlier switches were reverted for hot spots (stale snapshots
		// herding bursts; a burst's shared system prompt kept on one
		// engine, now the start-up rule), an 8-slot tail (the slot wait
		// priced as if requests ended evenly spread) and a collapse on
		// shared prefixes under cache pressure (only the match that fits
		// beside the held KV counted).
		Mode:         ModeWait,
		DecodeWeight: DefaultDecodeWeight,
		EvictWeight:  DefaultEvictWeight,
		FleetWeight:  DefaultFleetWeight,
		UnevenWeight: DefaultUnevenWeight,
		StepWeight:   DefaultStepWeight,
	}
}

// DefaultDecodeWeight is the cost mode's weight of held KV tokens: a tenth
// of a prompt token each, so that a worker's running requests tell where
// prefill queues are equal, without outweighing a match (a 12K-token prompt
// matched saves as much as 120K tokens held elsewhere cost).
const DefaultDecodeWeight = 0.1

// DefaultEvictWeight is the cost mode's weight of the pages a prompt evicts
// from a full cache: each costs four later prefills of it. Measured on the
// Mooncake synthetic trace (BENCHMARKS.md, trace replay): at 1 the cost mode
// traded matches for queues and its hit rate fell below the threshold rule's; at
// 4 it kept the threshold rule's hit rate with half its TTFT.
const DefaultEvictWeight = 4

// checkMode refuses a selection mode other than ModeThreshold, ModeCost and
// ModeWait, and weights that are negative, infinite or NaN.
func checkMode(mode string, decode, evict, fleet, uneven, step float64) error {
	var errs []error
	if mode != ModeThreshold && mode != ModeCost && mode != ModeWait {
		errs = append(errs, fmt.Errorf("--cache-aware-mode %q: want %s (SMG's threshold and balance rules), %s (least prefill, eviction, queue and decode cost) or %s (least expected wait for the first token)", mode, ModeThreshold, ModeCost, ModeWait))
	}
	for _, w := range []struct {
		flag string
		v    float64
	}{{"--cache-aware-decode-weight", decode}, {"--cache-aware-evict-weight", evict}, {"--cache-aware-fleet-weight", fleet}, {"--cache-aware-uneven-weight", uneven}, {"--cache-aware-step-weight", step}} {
		if !(w.v >= 0) || math.IsInf(w.v, 1) {
			errs = append(errs, fmt.Errorf("%s %g: must be ≥ 0 and finite", w.flag, w.v))
		}
	}
	return errors.Join(errs...)
}

// evictionPolicies are the tree's eviction orders, as --eviction-policy names them.
var evictionPolicies = []string{"lru", "lfu", "fifo", "mru", "filo", "priority"}

// Validate reports the first setting out of its range, naming its flag.
func (c CacheAwareConfig) Validate() error {
	var errs []error
	if !(c.CacheThreshold >= 0 && c.CacheThreshold <= 1) { // also refuses NaN
		errs = append(errs, fmt.Errorf("--cache-threshold %g: must be within [0, 1]", c.CacheThreshold))
	}
	if c.BalanceAbsThreshold < 0 {
		errs = append(errs, fmt.Errorf("--balance-abs-threshold %d: must be ≥ 0", c.BalanceAbsThreshold))
	}
	if err := checkRatio("--balance-rel-threshold", c.BalanceRelThreshold); err != nil {
		errs = append(errs, err)
	}
	if !(c.BalanceCapacityThreshold >= 0) || math.IsInf(c.BalanceCapacityThreshold, 1) {
		errs = append(errs, fmt.Errorf("--balance-capacity-threshold %g: must be ≥ 0 and finite", c.BalanceCapacityThreshold))
	}
	if c.CacheMissFallback != FallbackLeastLoaded && c.CacheMissFallback != FallbackSmallestTree {
		errs = append(errs, fmt.Errorf("--cache-miss-fallback %q: want %s or %s", c.CacheMissFallback, FallbackLeastLoaded, FallbackSmallestTree))
	}
	if c.EvictionInterval <= 0 {
		errs = append(errs, fmt.Errorf("--eviction-interval %v: must be > 0", c.EvictionInterval))
	}
	if c.BlockSize < 1 {
		errs = append(errs, fmt.Errorf("--block-size %d: must be ≥ 1", c.BlockSize))
	}
	if c.MaxTreeSize < max(c.BlockSize, 1) {
		errs = append(errs, fmt.Errorf("--max-tree-size %d: must be at least one page (%d tokens)", c.MaxTreeSize, max(c.BlockSize, 1)))
	}
	if c.SpeculativeTTL < 0 {
		errs = append(errs, fmt.Errorf("--speculative-ttl-ms %d: must be ≥ 0", c.SpeculativeTTL.Milliseconds()))
	}
	if !slices.Contains(evictionPolicies, strings.ToLower(c.EvictionPolicy)) {
		errs = append(errs, fmt.Errorf("--eviction-policy %q: want %s", c.EvictionPolicy, strings.Join(evictionPolicies, ", ")))
	}
	if err := checkMode(c.Mode, c.DecodeWeight, c.EvictWeight, c.FleetWeight, c.UnevenWeight, c.StepWeight); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// PrefixHashConfig configures prefix_hash: hash the first TokenCount tokens;
// skip an owner loaded above LoadFactor × the average.
type PrefixHashConfig struct {
	// TokenCount (--prefix-token-count) is ≥ 1: hashing no token would send
	// every prompt to one worker.
	TokenCount int
	// LoadFactor (--prefix-hash-load-factor) is ≥ 1: below the average, some
	// owner would always count as overloaded.
	LoadFactor float64
}

// DefaultPrefixHashConfig returns SMG's prefix_hash settings.
func DefaultPrefixHashConfig() PrefixHashConfig {
	return PrefixHashConfig{TokenCount: 256, LoadFactor: 1.25}
}

// Validate reports the settings out of range, naming their flags.
func (c PrefixHashConfig) Validate() error {
	var errs []error
	if c.TokenCount < 1 {
		errs = append(errs, fmt.Errorf("--prefix-token-count %d: must be ≥ 1", c.TokenCount))
	}
	if err := checkRatio("--prefix-hash-load-factor", c.LoadFactor); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ManualConfig configures manual: how a new routing key picks its worker,
// and how many keys, for how long, are remembered.
type ManualConfig struct {
	// AssignmentMode (--assignment-mode) is one of AssignmentModes.
	AssignmentMode string
	// MaxIdle (--max-idle-secs) is how long an unused key is remembered; > 0.
	MaxIdle time.Duration
	// EvictionInterval (--eviction-interval) is the time between idle-key
	// checks; > 0.
	EvictionInterval time.Duration
	// MaxKeys is the most keys remembered at once, ≥ 1; when full, the
	// least recently used key is forgotten. Each costs about 130 bytes
	// whatever the key's length (keys are kept as 64-bit hashes).
	MaxKeys int
}

// DefaultManualKeys bounds manual's memory at about 130 MB: a million
// sessions in the idle window is far beyond a fleet's concurrency, so only a
// client minting keys reaches it.
const DefaultManualKeys = 1_000_000

// DefaultManualConfig returns SMG's manual settings and the key cap.
func DefaultManualConfig() ManualConfig {
	return ManualConfig{
		AssignmentMode:   "random",
		MaxIdle:          14400 * time.Second,
		EvictionInterval: 60 * time.Second,
		MaxKeys:          DefaultManualKeys,
	}
}

// Validate reports the settings out of range, naming their flags.
func (c ManualConfig) Validate() error {
	var errs []error
	if err := CheckAssignmentMode(c.AssignmentMode); err != nil {
		errs = append(errs, fmt.Errorf("--assignment-mode: %w", err))
	}
	if c.MaxIdle <= 0 {
		errs = append(errs, fmt.Errorf("--max-idle-secs %v: must be > 0", c.MaxIdle))
	}
	if c.EvictionInterval <= 0 {
		errs = append(errs, fmt.Errorf("--eviction-interval %v: must be > 0", c.EvictionInterval))
	}
	if c.MaxKeys < 1 {
		errs = append(errs, fmt.Errorf("manual max keys %d: must be ≥ 1", c.MaxKeys))
	}
	return errors.Join(errs...)
}

// BucketConfig configures bucket: its own balance thresholds (SMG's
// bucket defaults differ from cache_aware's) and the adjustment interval.
type BucketConfig struct {
	// BalanceAbsThreshold (--balance-abs-threshold) is ≥ 0.
	BalanceAbsThreshold int
	// BalanceRelThreshold (--balance-rel-threshold) is ≥ 1.
	BalanceRelThreshold float64
	// AdjustInterval (--bucket-adjust-interval-secs) is > 0.
	AdjustInterval time.Duration
}

// DefaultBucketConfig returns SMG's bucket settings.
func DefaultBucketConfig() BucketConfig {
	return BucketConfig{BalanceAbsThreshold: 32, BalanceRelThreshold: 1.0001, AdjustInterval: 5 * time.Second}
}

// Validate reports the settings out of range, naming their flags.
func (c BucketConfig) Validate() error {
	var errs []error
	if c.BalanceAbsThreshold < 0 {
		errs = append(errs, fmt.Errorf("--balance-abs-threshold %d: must be ≥ 0", c.BalanceAbsThreshold))
	}
	if err := checkRatio("--balance-rel-threshold", c.BalanceRelThreshold); err != nil {
		errs = append(errs, err)
	}
	if c.AdjustInterval <= 0 {
		errs = append(errs, fmt.Errorf("--bucket-adjust-interval-secs %v: must be > 0", c.AdjustInterval))
	}
	return errors.Join(errs...)
}

// VllmCacheAwareConfig configures vllm_cache_aware, SMG's block cache
// tracker (SMG's vllm-cache-aware-design.md §9-10): route to the worker holding
// the most leading blocks of the prompt when they are more than
// CacheThreshold of its whole blocks and that worker's load is below
// LoadFactor × the average.
type VllmCacheAwareConfig struct {
	// BlockSize (--vllm-block-size) is the engines' tokens per KV block,
	// ≥ 1. It must match the vLLM engines' --block-size: blocks of another
	// size never line up with what an engine caches.
	BlockSize int
	// MaxBlocksPerBackend (--vllm-max-blocks-per-backend) bounds the blocks
	// tracked per worker, ≥ 1; the tracker holds it within a quarter at
	// all times and exactly after each periodic eviction.
	MaxBlocksPerBackend int
	// EvictionInterval (--vllm-eviction-interval-secs) is the time between
	// evictions down to MaxBlocksPerBackend, ≥ 0. 0 turns them off: the
	// bound still holds (within a quarter), since recording evicts.
	EvictionInterval time.Duration
	// CacheThreshold (--vllm-cache-threshold) is in [0, 1]. The match must
	// exceed it, as in SMG: 0 routes by cache whenever a block
	// matches, 1 never does.
	CacheThreshold float64
	// LoadFactor (--vllm-load-factor) is ≥ 1: below the average, some
	// worker holding the cache would always count as overloaded.
	LoadFactor float64
	// BlockHash (--vllm-block-hash) names the block keys: BlockHashChained
	// (each key names the whole prefix) or BlockHashPosition (SMG's
	// position ‖ tokens, which predicts blocks a worker does not hold
	// when prompts share a block at the same position after differing;
	// see BENCHMARKS.md).
	BlockHash string
	// Mode (--cache-aware-mode), DecodeWeight
	// (--cache-aware-decode-weight) and EvictWeight
	// (--cache-aware-evict-weight), FleetWeight, UnevenWeight and
	// StepWeight are as CacheAwareConfig's; in ModeCost and ModeWait the
	// threshold and load factor are unused.
	Mode                                                             string
	DecodeWeight, EvictWeight, FleetWeight, UnevenWeight, StepWeight float64
}

// Block key variants of --vllm-block-hash.
const (
	BlockHashChained  = tree.HashChained
	BlockHashPosition = tree.HashPosition
)

// DefaultVllmCacheAwareConfig returns SMG's settings and chained keys.
func DefaultVllmCacheAwareConfig() VllmCacheAwareConfig {
	return VllmCacheAwareConfig{
		BlockSize:           16,
		MaxBlocksPerBackend: 100_000,
		EvictionInterval:    60 * time.Second,
		CacheThreshold:      0.3,
		LoadFactor:          1.25,
		BlockHash:           BlockHashChained,
		// The wait mode, as cache_aware's, on the same evidence measured
		// on engines speaking the vLLM protocol (BENCHMARKS.md,
		// "vllm_cache_aware selects by the wait mode too").
		Mode:         ModeWait,
		DecodeWeight: DefaultDecodeWeight,
		EvictWeight:  DefaultEvictWeight,
		FleetWeight:  DefaultFleetWeight,
		UnevenWeight: DefaultUnevenWeight,
		StepWeight:   DefaultStepWeight,
	}
}

// Validate reports the settings out of range, naming their flags.
func (c VllmCacheAwareConfig) Validate() error {
	var errs []error
	if c.BlockSize < 1 {
		errs = append(errs, fmt.Errorf("--vllm-block-size %d: must be ≥ 1", c.BlockSize))
	}
	if c.MaxBlocksPerBackend < 1 {
		errs = append(errs, fmt.Errorf("--vllm-max-blocks-per-backend %d: must be ≥ 1", c.MaxBlocksPerBackend))
	}
	if c.EvictionInterval < 0 {
		errs = append(errs, fmt.Errorf("--vllm-eviction-interval-secs %v: must be ≥ 0 (0: no periodic eviction)", c.EvictionInterval))
	}
	if !(c.CacheThreshold >= 0 && c.CacheThreshold <= 1) { // also refuses NaN
		errs = append(errs, fmt.Errorf("--vllm-cache-threshold %g: must be within [0, 1]", c.CacheThreshold))
	}
	if err := checkRatio("--vllm-load-factor", c.LoadFactor); err != nil {
		errs = append(errs, err)
	}
	if c.BlockHash != BlockHashChained && c.BlockHash != BlockHashPosition {
		errs = append(errs, fmt.Errorf("--vllm-block-hash %q: want %s or %s", c.BlockHash, BlockHashChained, BlockHashPosition))
	}
	if err := checkMode(c.Mode, c.DecodeWeight, c.EvictWeight, c.FleetWeight, c.UnevenWeight, c.StepWeight); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkRatio refuses a ratio below 1, infinite or NaN.
func checkRatio(flag string, v float64) error {
	if !(v >= 1) || math.IsInf(v, 1) {
		return fmt.Errorf("%s %g: must be ≥ 1 and finite", flag, v)
	}
	return nil
}

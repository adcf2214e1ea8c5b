package main

import (
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/policy"
)

// parsePolicyFlags parses args as the routing flags alone.
func parsePolicyFlags(t *testing.T, args ...string) policy.Options {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var p policyFlags
	p.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return p.options()
}

// TestPolicyFlagsDefaults: with no flags, the options are DefaultOptions
// (the tree's page size learned as 16 from workers that report none).
func TestPolicyFlagsDefaults(t *testing.T) {
	got, want := parsePolicyFlags(t), policy.DefaultOptions()
	if got.CacheAware != want.CacheAware || got.PrefixHash != want.PrefixHash || got.Manual != want.Manual || got.Bucket != want.Bucket ||
		got.VllmCacheAware != want.VllmCacheAware {
		t.Fatalf("options from no flags:\n%+v\nwant\n%+v", got, want)
	}
}

// TestPolicyFlagsTakeValuesAsGiven is the flags' specification: zero is a
// value, shared flags reach both policies when given, and each policy keeps
// its own default when they are not.
func TestPolicyFlagsTakeValuesAsGiven(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		check func(o policy.Options) bool
	}{
		{"--cache-threshold 0 is 0", []string{"--cache-threshold", "0"},
			func(o policy.Options) bool { return o.CacheAware.CacheThreshold == 0 }},
		{"--max-tree-size 0 is 0 (and refused by New)", []string{"--max-tree-size", "0"},
			func(o policy.Options) bool { return o.CacheAware.MaxTreeSize == 0 }},
		{"--balance-abs-threshold 0 reaches cache_aware and bucket", []string{"--balance-abs-threshold", "0"},
			func(o policy.Options) bool {
				return o.CacheAware.BalanceAbsThreshold == 0 && o.Bucket.BalanceAbsThreshold == 0
			}},
		{"bucket keeps 32 / 1.0001 unless told", []string{"--balance-rel-threshold", "2"},
			func(o policy.Options) bool {
				return o.Bucket.BalanceAbsThreshold == 32 && o.Bucket.BalanceRelThreshold == 2 && o.CacheAware.BalanceAbsThreshold == 64
			}},
		{"manual keeps 60 s unless --eviction-interval is given", nil,
			func(o policy.Options) bool { return o.Manual.EvictionInterval == time.Minute }},
		{"--eviction-interval reaches manual", []string{"--eviction-interval", "7"},
			func(o policy.Options) bool {
				return o.Manual.EvictionInterval == 7*time.Second && o.CacheAware.EvictionInterval == 7*time.Second
			}},
		{"--block-size given", []string{"--block-size", "32"},
			func(o policy.Options) bool { return o.CacheAware.BlockSize == 32 }},
		{"--manual-max-keys", []string{"--manual-max-keys", "10"},
			func(o policy.Options) bool { return o.Manual.MaxKeys == 10 }},
		{"vllm_cache_aware's flags", []string{"--vllm-block-size", "32", "--vllm-max-blocks-per-backend", "500",
			"--vllm-eviction-interval-secs", "9", "--vllm-cache-threshold", "0.5", "--vllm-load-factor", "2", "--vllm-block-hash", "position"},
			func(o policy.Options) bool {
				return o.VllmCacheAware == policy.VllmCacheAwareConfig{BlockSize: 32, MaxBlocksPerBackend: 500,
					EvictionInterval: 9 * time.Second, CacheThreshold: 0.5, LoadFactor: 2, BlockHash: policy.BlockHashPosition,
					Mode: policy.ModeWait, DecodeWeight: policy.DefaultDecodeWeight, EvictWeight: policy.DefaultEvictWeight,
					FleetWeight: policy.DefaultFleetWeight, UnevenWeight: policy.DefaultUnevenWeight, StepWeight: policy.DefaultStepWeight}
			}},
		{"without --cache-aware-mode, both cache-aware policies use the wait mode", nil,
			func(o policy.Options) bool {
				return o.CacheAware.Mode == policy.ModeWait && o.VllmCacheAware.Mode == policy.ModeWait
			}},
		{"--cache-aware-mode threshold reaches cache_aware", []string{"--cache-aware-mode", "threshold"},
			func(o policy.Options) bool {
				return o.CacheAware.Mode == policy.ModeThreshold && o.VllmCacheAware.Mode == policy.ModeThreshold
			}},
		{"--cache-aware-mode and its weights reach both cache-aware policies", []string{"--cache-aware-mode", "cost", "--cache-aware-decode-weight", "0", "--cache-aware-evict-weight", "0"},
			func(o policy.Options) bool {
				return o.CacheAware.Mode == policy.ModeCost && o.VllmCacheAware.Mode == policy.ModeCost &&
					o.CacheAware.DecodeWeight == 0 && o.VllmCacheAware.DecodeWeight == 0 &&
					o.CacheAware.EvictWeight == 0 && o.VllmCacheAware.EvictWeight == 0
			}},
		{"--cache-aware-mode wait and its fleet weight reach both cache-aware policies", []string{"--cache-aware-mode", "wait", "--cache-aware-fleet-weight", "2.5"},
			func(o policy.Options) bool {
				return o.CacheAware.Mode == policy.ModeWait && o.VllmCacheAware.Mode == policy.ModeWait &&
					o.CacheAware.FleetWeight == 2.5 && o.VllmCacheAware.FleetWeight == 2.5
			}},
		{"--cache-aware-uneven-weight reaches both cache-aware policies", []string{"--cache-aware-mode", "wait", "--cache-aware-uneven-weight", "0"},
			func(o policy.Options) bool {
				return o.CacheAware.UnevenWeight == 0 && o.VllmCacheAware.UnevenWeight == 0
			}},
		{"--cache-aware-step-weight reaches both cache-aware policies", []string{"--cache-aware-step-weight", "0"},
			func(o policy.Options) bool {
				return o.CacheAware.StepWeight == 0 && o.VllmCacheAware.StepWeight == 0
			}},
		{"the step is priced at 1.5 steps by default", nil,
			func(o policy.Options) bool {
				return o.CacheAware.StepWeight == 1.5 && o.VllmCacheAware.StepWeight == 1.5
			}},
		{"--vllm-cache-threshold 0 and --vllm-eviction-interval-secs 0 are 0", []string{"--vllm-cache-threshold", "0", "--vllm-eviction-interval-secs", "0"},
			func(o policy.Options) bool {
				return o.VllmCacheAware.CacheThreshold == 0 && o.VllmCacheAware.EvictionInterval == 0
			}},
		{"vllm_cache_aware's flags leave cache_aware alone", []string{"--vllm-block-size", "32", "--vllm-cache-threshold", "0.9"},
			func(o policy.Options) bool { return o.CacheAware.BlockSize == 16 && o.CacheAware.CacheThreshold == 0.3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if o := parsePolicyFlags(t, tc.args...); !tc.check(o) {
				t.Fatalf("%v gave %+v", tc.args, o)
			}
		})
	}
}

// TestPolicyFlagsRefused: a value out of range is refused by policy.New with
// a message naming the flag.
func TestPolicyFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		policy string
		args   []string
		flag   string
	}{
		{"cache_aware", []string{"--cache-threshold", "1.5"}, "--cache-threshold"},
		{"cache_aware", []string{"--max-tree-size", "0"}, "--max-tree-size"},
		{"cache_aware", []string{"--block-size", "-1"}, "--block-size"},
		{"cache_aware", []string{"--eviction-interval", "0"}, "--eviction-interval"},
		{"bucket", []string{"--balance-rel-threshold", "0.5"}, "--balance-rel-threshold"},
		{"bucket", []string{"--bucket-adjust-interval-secs", "0"}, "--bucket-adjust-interval-secs"},
		{"prefix_hash", []string{"--prefix-token-count", "0"}, "--prefix-token-count"},
		{"manual", []string{"--max-idle-secs", "0"}, "--max-idle-secs"},
		{"manual", []string{"--assignment-mode", "sticky"}, "--assignment-mode"},
		{"vllm_cache_aware", []string{"--vllm-block-size", "0"}, "--vllm-block-size"},
		{"vllm_cache_aware", []string{"--vllm-max-blocks-per-backend", "0"}, "--vllm-max-blocks-per-backend"},
		{"vllm_cache_aware", []string{"--vllm-eviction-interval-secs", "-1"}, "--vllm-eviction-interval-secs"},
		{"vllm_cache_aware", []string{"--vllm-cache-threshold", "1.1"}, "--vllm-cache-threshold"},
		{"vllm_cache_aware", []string{"--vllm-load-factor", "0.8"}, "--vllm-load-factor"},
		{"vllm_cache_aware", []string{"--vllm-block-hash", "md5"}, "--vllm-block-hash"},
		{"cache_aware", []string{"--cache-aware-mode", "dynamo"}, "--cache-aware-mode"},
		{"vllm_cache_aware", []string{"--cache-aware-mode", "fast"}, "--cache-aware-mode"},
		{"cache_aware", []string{"--cache-aware-decode-weight", "-1"}, "--cache-aware-decode-weight"},
		{"vllm_cache_aware", []string{"--cache-aware-decode-weight", "NaN"}, "--cache-aware-decode-weight"},
		{"cache_aware", []string{"--cache-aware-evict-weight", "+Inf"}, "--cache-aware-evict-weight"},
		{"vllm_cache_aware", []string{"--cache-aware-fleet-weight", "-1"}, "--cache-aware-fleet-weight"},
		{"cache_aware", []string{"--cache-aware-uneven-weight", "-0.5"}, "--cache-aware-uneven-weight"},
		{"vllm_cache_aware", []string{"--cache-aware-step-weight", "-1"}, "--cache-aware-step-weight"},
		{"cache_aware", []string{"--cache-aware-step-weight", "NaN"}, "--cache-aware-step-weight"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := policy.New(tc.policy, parsePolicyFlags(t, tc.args...))
			if err == nil || !strings.Contains(err.Error(), tc.flag) {
				t.Fatalf("policy.New(%s) = %v, want an error naming %s", tc.policy, err, tc.flag)
			}
		})
	}
}

// TestPolicyFlagsHelpStatesNoMagicZero: the help no longer says "0: the
// policy's default"; each flag's default is its real one.
func TestPolicyFlagsHelpStatesNoMagicZero(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var p policyFlags
	p.register(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if strings.Contains(f.Usage, "policy's default") {
			t.Errorf("--%s: %q", f.Name, f.Usage)
		}
	})
	for name, want := range map[string]string{"cache-threshold": "0.3", "max-tree-size": "67108864", "balance-abs-threshold": "64", "eviction-interval": "120",
		"vllm-block-size": "16", "vllm-max-blocks-per-backend": "100000", "vllm-eviction-interval-secs": "60",
		"vllm-cache-threshold": "0.3", "vllm-load-factor": "1.25", "vllm-block-hash": "chained"} {
		if got := fs.Lookup(name).DefValue; got != want {
			t.Errorf("--%s default %s, want %s", name, got, want)
		}
	}
}

// TestBlockSizesLearnedUnlessGiven: the router takes cache_aware's page
// size and vllm_cache_aware's block size from the engines unless the flag
// for it was given (--block-size 0 also asks to learn).
func TestBlockSizesLearnedUnlessGiven(t *testing.T) {
	for _, tc := range []struct {
		flags             []string
		learnCA, learnVCA bool
	}{
		{nil, true, true},
		{[]string{"--vllm-block-size", "16"}, true, false},
		{[]string{"--vllm-block-size", "32"}, true, false},
		{[]string{"--block-size", "16"}, false, true},
		{[]string{"--block-size", "0"}, true, true},
	} {
		c := defaults(t, append([]string{"--worker-urls", "grpc://127.0.0.1:1"}, tc.flags...)...)
		g, stop, err := c.routerConfig(slog.New(slog.DiscardHandler))
		stop()
		if err != nil {
			t.Fatalf("%v: %v", tc.flags, err)
		}
		if g.LearnBlockSize != tc.learnCA || g.LearnVllmBlockSize != tc.learnVCA {
			t.Errorf("%v: learn cache_aware's %v, vllm_cache_aware's %v; want %v, %v",
				tc.flags, g.LearnBlockSize, g.LearnVllmBlockSize, tc.learnCA, tc.learnVCA)
		}
	}
}

package policy_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/workers"
)

// TestDefaultOptionsAreValid: every policy builds from DefaultOptions, and
// the defaults are SMG's (bucket keeps its own thresholds).
func TestDefaultOptionsAreValid(t *testing.T) {
	for _, name := range policy.Names() {
		if _, err := policy.New(name, policy.DefaultOptions()); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	d := policy.DefaultOptions()
	if c := d.CacheAware; c.CacheThreshold != 0.3 || c.BalanceAbsThreshold != 64 || c.BalanceRelThreshold != 1.5 ||
		c.MaxTreeSize != 67108864 || c.EvictionInterval != 120*time.Second || c.BlockSize != 16 {
		t.Errorf("cache_aware defaults %+v", c)
	}
	if b := d.Bucket; b.BalanceAbsThreshold != 32 || b.BalanceRelThreshold != 1.0001 || b.AdjustInterval != 5*time.Second {
		t.Errorf("bucket defaults %+v", b)
	}
	if m := d.Manual; m.EvictionInterval != 60*time.Second || m.MaxIdle != 4*time.Hour || m.MaxKeys != policy.DefaultManualKeys {
		t.Errorf("manual defaults %+v", m)
	}
}

// TestOptionsValidation is the range of every setting: New accepts the
// edges (zero included where it is meaningful) and refuses what lies beyond
// with an error naming the flag.
func TestOptionsValidation(t *testing.T) {
	for _, tc := range []struct {
		policy string
		name   string
		edit   func(*policy.Options)
		flag   string // "" if valid
	}{
		{"cache_aware", "threshold 0 is honoured", func(o *policy.Options) { o.CacheAware.CacheThreshold = 0 }, ""},
		{"cache_aware", "threshold 1", func(o *policy.Options) { o.CacheAware.CacheThreshold = 1 }, ""},
		{"cache_aware", "threshold above 1", func(o *policy.Options) { o.CacheAware.CacheThreshold = 1.5 }, "--cache-threshold"},
		{"cache_aware", "negative threshold", func(o *policy.Options) { o.CacheAware.CacheThreshold = -0.1 }, "--cache-threshold"},
		{"cache_aware", "NaN threshold", func(o *policy.Options) { o.CacheAware.CacheThreshold = math.NaN() }, "--cache-threshold"},
		{"cache_aware", "abs threshold 0", func(o *policy.Options) { o.CacheAware.BalanceAbsThreshold = 0 }, ""},
		{"cache_aware", "negative abs threshold", func(o *policy.Options) { o.CacheAware.BalanceAbsThreshold = -1 }, "--balance-abs-threshold"},
		{"cache_aware", "rel threshold 1", func(o *policy.Options) { o.CacheAware.BalanceRelThreshold = 1 }, ""},
		{"cache_aware", "rel threshold 0", func(o *policy.Options) { o.CacheAware.BalanceRelThreshold = 0 }, "--balance-rel-threshold"},
		{"cache_aware", "unknown fallback", func(o *policy.Options) { o.CacheAware.CacheMissFallback = "nearest" }, "--cache-miss-fallback"},
		{"cache_aware", "eviction interval 0", func(o *policy.Options) { o.CacheAware.EvictionInterval = 0 }, "--eviction-interval"},
		{"cache_aware", "tree of one page", func(o *policy.Options) { o.CacheAware.MaxTreeSize = 16 }, ""},
		{"cache_aware", "tree size 0 (unbounded) refused", func(o *policy.Options) { o.CacheAware.MaxTreeSize = 0 }, "--max-tree-size"},
		{"cache_aware", "tree under a page", func(o *policy.Options) { o.CacheAware.MaxTreeSize = 15 }, "--max-tree-size"},
		{"cache_aware", "block size 0", func(o *policy.Options) { o.CacheAware.BlockSize = 0 }, "--block-size"},
		{"cache_aware", "unknown eviction order", func(o *policy.Options) { o.CacheAware.EvictionPolicy = "random" }, "--eviction-policy"},
		{"cache_aware", "eviction order any case", func(o *policy.Options) { o.CacheAware.EvictionPolicy = "LFU" }, ""},
		{"prefix_hash", "one token hashed", func(o *policy.Options) { o.PrefixHash.TokenCount = 1 }, ""},
		{"prefix_hash", "no token hashed", func(o *policy.Options) { o.PrefixHash.TokenCount = 0 }, "--prefix-token-count"},
		{"prefix_hash", "load factor 1", func(o *policy.Options) { o.PrefixHash.LoadFactor = 1 }, ""},
		{"prefix_hash", "load factor under 1", func(o *policy.Options) { o.PrefixHash.LoadFactor = 0.5 }, "--prefix-hash-load-factor"},
		{"prefix_hash", "infinite load factor", func(o *policy.Options) { o.PrefixHash.LoadFactor = math.Inf(1) }, "--prefix-hash-load-factor"},
		{"manual", "empty mode", func(o *policy.Options) { o.Manual.AssignmentMode = "" }, "--assignment-mode"},
		{"manual", "max idle 0", func(o *policy.Options) { o.Manual.MaxIdle = 0 }, "--max-idle-secs"},
		{"manual", "eviction interval 0", func(o *policy.Options) { o.Manual.EvictionInterval = 0 }, "--eviction-interval"},
		{"manual", "one key", func(o *policy.Options) { o.Manual.MaxKeys = 1 }, ""},
		{"manual", "no keys", func(o *policy.Options) { o.Manual.MaxKeys = 0 }, "max keys"},
		{"bucket", "abs threshold 0", func(o *policy.Options) { o.Bucket.BalanceAbsThreshold = 0 }, ""},
		{"bucket", "negative abs threshold", func(o *policy.Options) { o.Bucket.BalanceAbsThreshold = -1 }, "--balance-abs-threshold"},
		{"bucket", "rel threshold under 1", func(o *policy.Options) { o.Bucket.BalanceRelThreshold = 0.9 }, "--balance-rel-threshold"},
		{"bucket", "adjust interval 0", func(o *policy.Options) { o.Bucket.AdjustInterval = 0 }, "--bucket-adjust-interval-secs"},
		{"random", "ignores the others' settings", func(o *policy.Options) { o.CacheAware.MaxTreeSize = 0 }, ""},
	} {
		t.Run(tc.policy+"/"+tc.name, func(t *testing.T) {
			_, err := policy.New(tc.policy, opts(tc.edit))
			switch {
			case tc.flag == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.flag != "" && (err == nil || !strings.Contains(err.Error(), tc.flag)):
				t.Fatalf("err = %v, want one naming %s", err, tc.flag)
			}
		})
	}
}

// TestCacheThresholdZeroRoutesByAnyMatch: threshold 0 is a value, not "the
// default 0.3": one matching page of a long prompt is a cache hit.
func TestCacheThresholdZeroRoutesByAnyMatch(t *testing.T) {
	for _, tc := range []struct {
		threshold float64
		branch    string
	}{
		{0, "cache_hit"},
		{0.3, "cache_miss"}, // 16 of 160 tokens is 10%
	} {
		ws := fleet(2)
		p := newCA(t, func(o *policy.Options) { o.CacheAware.CacheThreshold = tc.threshold })
		place(t, p, ws[1], caTokens(1, 16))
		prompt := caJoin(caTokens(1, 16), caTokens(2, 144))
		d, err := p.Select(context.Background(), &policy.Request{InputIDs: prompt}, workers.Views([]*workers.Worker{ws[0], ws[1]}))
		if err != nil {
			t.Fatal(err)
		}
		if d.Branch != tc.branch || tc.branch == "cache_hit" && d.Worker != ws[1] {
			t.Errorf("threshold %g: %s to %s (%s), want %s", tc.threshold, d.Branch, d.Worker.URL(), d.Why(), tc.branch)
		}
	}
}

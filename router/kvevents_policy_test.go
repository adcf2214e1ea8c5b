package router

import (
	"testing"

	"github.com/kvgate/kvgate/policy"
)

// TestConsumesKVEventsReadsTheRegistry: whether the router subscribes to
// the engines' KV events follows from the policies' names alone, not from
// building them: options a policy would refuse (here a cache threshold
// outside [0, 1]) do not change the answer.
func TestConsumesKVEventsReadsTheRegistry(t *testing.T) {
	refused := policy.DefaultOptions()
	refused.CacheAware.CacheThreshold = 2
	refused.VllmCacheAware.CacheThreshold = 2
	for _, tc := range []struct {
		name string
		cfg  Config
		want bool
	}{
		{"cache_aware", Config{Policy: "cache_aware", Options: refused}, true},
		{"vllm_cache_aware", Config{Policy: "vllm_cache_aware", Options: refused}, true},
		{"round_robin", Config{Policy: "round_robin", Options: refused}, false},
		{"PD: cache_aware prefill", Config{PD: true, PrefillPolicy: "cache_aware", DecodePolicy: "power_of_two", Options: refused}, true},
		{"PD: neither leg", Config{PD: true, PrefillPolicy: "random", DecodePolicy: "power_of_two", Policy: "cache_aware", Options: refused}, false},
	} {
		if got := consumesKVEvents(tc.cfg); got != tc.want {
			t.Errorf("%s: consumesKVEvents = %v, want %v", tc.name, got, tc.want)
		}
	}
}

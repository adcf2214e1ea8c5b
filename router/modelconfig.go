package router

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kvgate/kvgate/policy"
)

// ModelConfig is one model's own routing (--model-config), for a router
// serving many models: a field left empty (nil) takes the router-wide
// setting, so a zero threshold is a value, not "the default".
type ModelConfig struct {
	// Policy places the model's regular requests; PrefillPolicy and
	// DecodePolicy its two legs with PD.
	Policy, PrefillPolicy, DecodePolicy string
	// CacheThreshold, BalanceAbsThreshold and BalanceRelThreshold are
	// cache_aware's (--cache-threshold, --balance-abs-threshold,
	// --balance-rel-threshold).
	CacheThreshold      *float64
	BalanceAbsThreshold *int
	BalanceRelThreshold *float64
}

// modelRouting is a model's routing: its own settings where it has them,
// else the router-wide ones.
type modelRouting struct {
	policy, prefill, decode string
	options                 policy.Options
}

func (cfg Config) modelRouting(name string) modelRouting {
	r := modelRouting{policy: cfg.Policy, prefill: cfg.PrefillPolicy, decode: cfg.DecodePolicy, options: cfg.Options}
	mc, ok := cfg.Models[name]
	if !ok {
		return r
	}
	r.policy, r.prefill, r.decode = cmp.Or(mc.Policy, r.policy), cmp.Or(mc.PrefillPolicy, r.prefill), cmp.Or(mc.DecodePolicy, r.decode)
	ca := &r.options.CacheAware
	if mc.CacheThreshold != nil {
		ca.CacheThreshold = *mc.CacheThreshold
	}
	if mc.BalanceAbsThreshold != nil {
		ca.BalanceAbsThreshold = *mc.BalanceAbsThreshold
	}
	if mc.BalanceRelThreshold != nil {
		ca.BalanceRelThreshold = *mc.BalanceRelThreshold
	}
	return r
}

// policies are the names of the policies that place the model's requests.
func (r modelRouting) policies(pd bool) []string {
	if pd {
		return []string{r.prefill, r.decode}
	}
	return []string{r.policy}
}

// validateModels reports the first model configuration New cannot serve,
// naming the model and the setting.
func (cfg Config) validateModels() error {
	if len(cfg.Models) > 0 && !cfg.IGW {
		return errors.New("per-model configuration (--model-config) tells models apart by name: it needs --enable-igw")
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Models)) {
		if name == "" {
			return errors.New("per-model configuration: a model needs a name")
		}
		r := cfg.modelRouting(name)
		for _, p := range r.policies(cfg.PD) {
			if !slices.Contains(policy.Names(), p) {
				return fmt.Errorf("model %q: unknown policy %q (available: %s)", name, p, strings.Join(policy.Names(), ", "))
			}
		}
		if err := r.options.CacheAware.Validate(); err != nil {
			return fmt.Errorf("model %q: %w", name, err)
		}
	}
	return nil
}

package router_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/policy"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers/sim"
)

func f64(v float64) *float64 { return &v }

// Each model is placed by its own policy and thresholds where the
// per-model configuration gives them, and by the flags' where it does not.
func TestModelConfigGivesEachModelItsOwnRouting(t *testing.T) {
	alpha := simWith(t, "127.0.0.1:0", func(c *sim.Config) { c.Model = "alpha" })
	beta := simWith(t, "127.0.0.1:0", func(c *sim.Config) { c.Model = "beta" })
	gamma := simWith(t, "127.0.0.1:0", func(c *sim.Config) { c.Model = "gamma" })
	cfg := router.DefaultConfig()
	cfg.IGW, cfg.TokenIDsOnly = true, true
	cfg.WorkerURLs = []string{"grpc://" + alpha.Addr(), "grpc://" + beta.Addr(), "grpc://" + gamma.Addr()}
	cfg.Health.Interval = time.Hour
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Models = map[string]router.ModelConfig{
		"beta":  {Policy: "round_robin"},
		"gamma": {CacheThreshold: f64(0)}, // zero is a value: route by cache on any match
	}
	g, err := router.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	tests := []struct {
		model, policy string
		threshold     float64 // cache_aware's; -1: another policy
	}{
		{"alpha", "cache_aware", 0.3},
		{"beta", "round_robin", -1},
		{"gamma", "cache_aware", 0},
	}
	for _, tt := range tests {
		m := g.Server.Models().Get(tt.model)
		if m == nil {
			t.Fatalf("model %s is not served", tt.model)
		}
		if got := m.Main().Name(); got != tt.policy {
			t.Errorf("model %s: policy %s, want %s", tt.model, got, tt.policy)
		}
		threshold := -1.0
		if ca, ok := m.Main().(*policy.CacheAware); ok {
			threshold, _, _ = ca.Thresholds()
		}
		if threshold != tt.threshold {
			t.Errorf("model %s: cache threshold %v, want %v", tt.model, threshold, tt.threshold)
		}
	}
}

// A per-model configuration the router cannot serve is refused at start-up,
// naming the model and the setting.
func TestModelConfigRefusesWhatItCannotServe(t *testing.T) {
	tests := []struct {
		name   string
		igw    bool
		models map[string]router.ModelConfig
		says   []string
	}{
		{"without --enable-igw", false, map[string]router.ModelConfig{"alpha": {Policy: "round_robin"}}, []string{"--enable-igw"}},
		{"unknown policy", true, map[string]router.ModelConfig{"alpha": {Policy: "fastest"}}, []string{`"alpha"`, `"fastest"`}},
		{"threshold out of range", true, map[string]router.ModelConfig{"alpha": {CacheThreshold: f64(1.5)}}, []string{`"alpha"`, "cache-threshold"}},
		{"no name", true, map[string]router.ModelConfig{"": {Policy: "round_robin"}}, []string{"name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := router.DefaultConfig()
			cfg.IGW, cfg.TokenIDsOnly, cfg.Models = tt.igw, true, tt.models
			cfg.Logger = slog.New(slog.DiscardHandler)
			g, err := router.New(context.Background(), cfg)
			if err == nil {
				g.Close()
				t.Fatal("New succeeded")
			}
			for _, s := range tt.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %s", err, s)
				}
			}
		})
	}
}

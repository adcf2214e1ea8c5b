package discovery_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/kvgate/kvgate/discovery"
	"github.com/kvgate/kvgate/router"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// With --wait-for-workers, a router whose fleet comes from discovery starts
// once a discovered worker is connected, and fails to start, naming the
// flag, when no pod is there within the startup timeout. Without a model
// path, its tokenizer comes from the discovered engine.
func TestStartupWaitsForDiscoveredWorkers(t *testing.T) {
	e := engine(t, sim.RoleRegular)
	tests := []struct {
		name    string
		pods    bool
		wantErr string
	}{
		{"a Ready pod", true, ""},
		{"no pod", false, "no discovered worker reachable within --worker-startup-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k8s := fake.NewClientset()
			if tt.pods {
				// Before the router starts: the informer's first list has it.
				p := podOf("p", e, true, map[string]string{"app": "engine"})
				if err := k8s.Tracker().Add(p); err != nil {
					t.Fatal(err)
				}
			}
			dc := discovery.DefaultConfig()
			dc.Pods, dc.Namespace, dc.Regular = fakePods(k8s), ns, map[string]string{"app": "engine"}
			cfg := router.DefaultConfig()
			cfg.Logger = slog.New(slog.DiscardHandler)
			cfg.Health = workers.HealthConfig{Interval: time.Hour, Timeout: time.Second, FailureThreshold: 1, SuccessThreshold: 1}
			cfg.Discovery = &dc
			cfg.WaitForWorkers, cfg.StartupTimeout = true, 300*time.Millisecond
			if tt.pods {
				cfg.StartupTimeout = 10 * time.Second // a hung test's bound
			}
			g, err := router.New(context.Background(), cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New: %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if ws := g.Registry.Snapshot(); len(ws) != 1 || !ws[0].Connected() || ws[0].URL() != url(e) {
				t.Errorf("after New the fleet is %v, want the pod's engine, connected", ws)
			}
			if g.Text == nil {
				t.Error("no tokenizer: it should have come from the discovered engine")
			}
		})
	}
}

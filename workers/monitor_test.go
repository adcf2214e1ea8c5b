package workers_test

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/kvgate/kvgate/api/gen/sglang"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
)

// healthEvent is one flip reported through HealthConfig.OnChange, with the
// number of checks the engine had answered at that moment. Rounds of checks
// never overlap and OnChange runs inside its round, so that number is exact.
type healthEvent struct {
	healthy bool
	atCheck int64
}

// unhealthyAt is a health script: the engine fails the listed checks.
func unhealthyAt(checks ...int64) healthScript {
	return func(n int64) bool {
		for _, c := range checks {
			if n == c {
				return false
			}
		}
		return true
	}
}

func TestHealthChecksThresholds(t *testing.T) {
	tests := []struct {
		name          string
		script        healthScript
		startHealthy  bool
		runUntilCheck int64
		want          []healthEvent
	}{
		{"three failures mark unhealthy, two successes restore", unhealthyAt(3, 4, 5), true, 10,
			[]healthEvent{{false, 5}, {true, 7}}},
		{"two failures in a row are tolerated", unhealthyAt(2, 3, 5, 6), true, 10, nil},
		{"a lone success does not restore", unhealthyAt(1, 2, 3, 5), true, 10,
			[]healthEvent{{false, 3}, {true, 7}}},
		{"a worker marked failed elsewhere is restored by successes", nil, false, 5,
			[]healthEvent{{true, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eng := &sglangEngine{health: tt.script}
			w, err := workers.Connect(testutil.Context(t, 5*time.Second), eng.start(t), workers.ConnectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			w.SetHealthy(tt.startHealthy)
			reg := workers.NewRegistry()
			if err := reg.Add(w); err != nil {
				t.Fatal(err)
			}

			var mu sync.Mutex
			var got []healthEvent
			cfg := workers.HealthConfig{
				Interval: 2 * time.Millisecond, Timeout: time.Second, FailureThreshold: 3, SuccessThreshold: 2,
				OnChange: func(cw *workers.Worker, healthy bool) {
					if cw != w || cw.Healthy() != healthy {
						t.Errorf("OnChange(%v, %v) but worker health is %v", cw, healthy, cw.Healthy())
					}
					mu.Lock()
					got = append(got, healthEvent{healthy, eng.healthCalls.Load()})
					mu.Unlock()
				},
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() {
				defer close(done)
				workers.RunHealthChecks(ctx, reg, cfg, nil)
			}()
			testutil.Eventually(t, "health checks", func() bool { return eng.healthCalls.Load() >= tt.runUntilCheck })
			cancel()
			<-done

			mu.Lock()
			defer mu.Unlock()
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("health flips = %v, want %v", got, tt.want)
			}
			if w.Healthy() != true {
				t.Errorf("worker ends unhealthy; every script ends healthy")
			}
		})
	}
}

func TestHealthChecksStopWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		workers.RunHealthChecks(ctx, workers.NewRegistry(), workers.HealthConfig{}, nil)
		workers.RunLoadPolls(ctx, workers.NewRegistry(), 0, nil)
	}()
	testutil.Receive(t, done, "the monitors to return after their context ended")
}

func TestLoadPolls(t *testing.T) {
	eng := &sglangEngine{loads: &sglang.GetLoadsResponse{Loads: []*sglang.SchedulerLoad{
		{NumRunningReqs: 4, NumWaitingReqs: 2, NumUsedTokens: 300, MaxTotalNumTokens: 1000, CacheHitRate: 0.5},
	}}}
	w, err := workers.Connect(testutil.Context(t, 5*time.Second), eng.start(t), workers.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	reg := workers.NewRegistry()
	if err := reg.Add(w); err != nil {
		t.Fatal(err)
	}
	// One request of ours is in flight on the worker throughout; the engine's
	// six include it.
	release := w.Acquire()
	defer release()

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		workers.RunLoadPolls(ctx, reg, 2*time.Millisecond, nil)
	}()
	testutil.Eventually(t, "a load poll", func() bool { return w.EngineLoad().Running == 4 })
	cancel()
	<-done

	want := workers.Load{Running: 4, Waiting: 2, UsedTokens: 300, MaxTotalTokens: 1000, TokenUsage: 0.3, CacheHitRate: 0.5}
	if got := w.EngineLoad(); !loadsClose(got, want) {
		t.Errorf("EngineLoad = %+v, want %+v", got, want)
	}
	// Ours (1) plus the engine's requests that are not ours (6 - 1).
	if got := w.Load(); got != 6 {
		t.Errorf("Load = %d, want 6", got)
	}
}

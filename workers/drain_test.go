package workers_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/kvgate/kvgate/workers"
)

// TestWorkerAvailable: a policy may pick a worker only when it is healthy,
// not draining, and its breaker allows it.
func TestWorkerAvailable(t *testing.T) {
	tests := []struct {
		name        string
		healthy     bool
		draining    bool
		breakerOpen bool
		want        bool
	}{
		{"healthy", true, false, false, true},
		{"unhealthy", false, false, false, false},
		{"draining", true, true, false, false},
		{"breaker open", true, false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTestWorker("grpc://w:1")
			w.SetHealthy(tt.healthy)
			w.SetDraining(tt.draining)
			if tt.breakerOpen {
				if err := w.Breaker().Reconfigure(workers.BreakerConfig{FailureThreshold: 1, SuccessThreshold: 1, Timeout: 1 << 40, HalfOpenProbes: 1}); err != nil {
					t.Fatal(err)
				}
				done, _ := w.Breaker().Acquire()
				done(workers.Failure)
			}
			if got := w.Available(); got != tt.want {
				t.Errorf("Available() = %v, want %v", got, tt.want)
			}
			if w.Draining() != tt.draining {
				t.Errorf("Draining() = %v", w.Draining())
			}
		})
	}
}

// TestWaitIdle: WaitIdle returns at once on an idle worker, blocks while a
// request is in flight, returns when the last release comes, and gives up
// with ctx.
func TestWaitIdle(t *testing.T) {
	w := newTestWorker("grpc://w:1")
	if err := w.WaitIdle(t.Context()); err != nil {
		t.Fatalf("idle worker: %v", err)
	}

	r1, r2 := w.Acquire(), w.Acquire()
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if err := w.WaitIdle(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("busy worker with a cancelled ctx: %v", err)
	}

	idle := w.Idle()
	waited := make(chan error, 1)
	go func() { waited <- w.WaitIdle(t.Context()) }()
	r1()
	r1() // release is idempotent: this must not count for r2
	select {
	case <-idle:
		t.Fatal("idle with one request still in flight")
	default:
	}
	r2()
	if err := <-waited; err != nil {
		t.Fatalf("WaitIdle: %v", err)
	}
	if w.InFlight() != 0 {
		t.Errorf("InFlight() = %d", w.InFlight())
	}
}

// TestWaitIdleConcurrent hammers Acquire/release under -race; every waiter
// returns once all are released.
func TestWaitIdleConcurrent(t *testing.T) {
	w := newTestWorker("grpc://w:1")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				w.Acquire()()
			}
		})
		wg.Go(func() { _ = w.WaitIdle(t.Context()) })
	}
	wg.Wait()
	if err := w.WaitIdle(t.Context()); err != nil || w.InFlight() != 0 {
		t.Errorf("WaitIdle = %v, InFlight = %d", err, w.InFlight())
	}
}

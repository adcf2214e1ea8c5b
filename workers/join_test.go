package workers_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/fault"
	"github.com/kvgate/kvgate/internal/testutil"
	"github.com/kvgate/kvgate/workers"
	"github.com/kvgate/kvgate/workers/sim"
)

// freeAddr returns a loopback address nothing listens on (it was free a
// moment ago; the test starts an engine there later).
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func simConfig() sim.Config {
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 0
	cfg.TokenizerDir = "none"
	cfg.VocabSize = 1000
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

// logLines is a slog handler that hands each record's message to a channel,
// so a test can wait for the background retry loop to say it stopped.
type logLines chan string

func (l logLines) Enabled(context.Context, slog.Level) bool      { return true }
func (l logLines) Handle(_ context.Context, r slog.Record) error { l <- r.Message; return nil }
func (l logLines) WithAttrs([]slog.Attr) slog.Handler            { return l }
func (l logLines) WithGroup(string) slog.Handler                 { return l }

func waitLog(t *testing.T, lines logLines, prefix string) {
	t.Helper()
	for m := range lines {
		if strings.HasPrefix(m, prefix) {
			return
		}
	}
}

// TestJoinLateEngine: Join of an engine that is not up yet registers an
// unhealthy placeholder that answers UNAVAILABLE; once the engine starts,
// the placeholder is replaced in place by a healthy connected worker, and
// Watch reports it as one change.
func TestJoinLateEngine(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	reg := workers.NewRegistry()
	first := newTestWorker("grpc://first:1")
	if err := reg.Add(first); err != nil {
		t.Fatal(err)
	}
	changes := make(chan workers.Change, 4)
	defer reg.Watch(func(c workers.Change) { changes <- c })()

	addr := freeAddr(t)
	p, err := workers.Join(ctx, reg, addr, workers.ConnectOptions{}, nil)
	if err != nil {
		t.Fatalf("Join of an unreachable engine: %v", err)
	}
	if p.Healthy() || p.Connected() || p.Available() || p.Info().Model != "" || p.Info().VocabSize != 0 || p.URL() != "grpc://"+addr {
		t.Fatalf("placeholder: healthy %v connected %v info %+v url %s", p.Healthy(), p.Connected(), p.Info(), p.URL())
	}
	if err := p.Backend().Health(ctx); !testutil.IsFault(err, fault.Unavailable) || !strings.Contains(err.Error(), "not connected yet") {
		t.Errorf("placeholder Health: %v", err)
	}
	if _, err := p.Backend().Generate(ctx, &workers.GenerateRequest{RequestID: "x", InputIDs: []uint32{1}}); !testutil.IsFault(err, fault.Unavailable) {
		t.Errorf("placeholder Generate: %v", err)
	}
	if c := <-changes; !slices.Equal(c.Added, []*workers.Worker{p}) {
		t.Fatalf("first change: %+v", c)
	}
	if _, err := workers.Join(ctx, reg, addr, workers.ConnectOptions{}, nil); !errors.Is(err, workers.ErrWorkerExists) {
		t.Errorf("second Join of the same URL: %v, want ErrWorkerExists", err)
	}

	srv, err := sim.Start(simConfig(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()

	c := <-changes
	if len(c.Removed) != 1 || c.Removed[0] != p || len(c.Added) != 1 {
		t.Fatalf("join change: %+v", c)
	}
	w := c.Added[0]
	if !w.Healthy() || !w.Connected() || w.URL() != p.URL() || w.Protocol() != workers.ProtocolSGLang || w.Info().Model != "kvgate-sim-8b" {
		t.Fatalf("joined worker: healthy %v connected %v %s %v %+v", w.Healthy(), w.Connected(), w.URL(), w.Protocol(), w.Info())
	}
	defer w.Close()
	if cur := reg.Current(); !slices.Equal(cur.Workers, []*workers.Worker{first, w}) || cur.Generation != c.Generation {
		t.Fatalf("registry after join: %v gen %d", urls(cur.Workers), cur.Generation)
	}
	if err := w.Backend().Health(ctx); err != nil {
		t.Errorf("joined worker Health: %v", err)
	}
}

// TestJoinReachable: a reachable engine joins at once, connected.
func TestJoinReachable(t *testing.T) {
	srv, err := sim.Start(simConfig(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	reg := workers.NewRegistry()
	w, err := workers.Join(t.Context(), reg, srv.Addr(), workers.ConnectOptions{Role: workers.RoleDecode}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !w.Connected() || !w.Healthy() || w.Role() != workers.RoleDecode {
		t.Fatalf("worker: connected %v healthy %v role %v", w.Connected(), w.Healthy(), w.Role())
	}
	if got, _ := reg.Get(srv.Addr()); got != w {
		t.Fatal("not registered")
	}
}

// TestJoinStops: retrying ends when the placeholder is removed or ctx ends.
func TestJoinStops(t *testing.T) {
	tests := []struct {
		name string
		stop func(reg *workers.Registry, p *workers.Worker, cancel context.CancelFunc)
	}{
		{"placeholder removed", func(reg *workers.Registry, p *workers.Worker, _ context.CancelFunc) {
			if _, err := reg.Remove(p.URL()); err != nil {
				panic(err)
			}
		}},
		{"context ended", func(_ *workers.Registry, _ *workers.Worker, cancel context.CancelFunc) { cancel() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			reg := workers.NewRegistry()
			lines := make(logLines, 100)
			p, err := workers.Join(ctx, reg, freeAddr(t), workers.ConnectOptions{}, slog.New(lines))
			if err != nil {
				t.Fatal(err)
			}
			tt.stop(reg, p, cancel)
			waitLog(t, lines, "stopped retrying")
		})
	}
}

func TestJoinErrors(t *testing.T) {
	reg := workers.NewRegistry()
	bad := workers.DefaultBreakerConfig()
	bad.Timeout = 0
	tests := []struct {
		name string
		addr string
		opts workers.ConnectOptions
	}{
		{"malformed address", "ftp://x:1", workers.ConnectOptions{}},
		{"missing port", "localhost", workers.ConnectOptions{}},
		{"bad breaker config", "127.0.0.1:1", workers.ConnectOptions{Breaker: &bad}},
	}
	for _, tt := range tests {
		if _, err := workers.Join(t.Context(), reg, tt.addr, tt.opts, nil); err == nil {
			t.Errorf("%s: Join succeeded", tt.name)
		}
	}
	if n := len(reg.Current().Workers); n != 0 {
		t.Errorf("%d workers registered by failed Joins", n)
	}
}

// ConnectOptions.Admit decides whether a connected engine enters the
// registry, both when Join finds it up and when a placeholder's engine
// starts later; a refused placeholder stays and keeps being retried.
func TestJoinAsksAdmit(t *testing.T) {
	refuse := func(w *workers.Worker) error {
		return fmt.Errorf("worker %s: %w: vocab_size %d", w.URL(), workers.ErrIncompatible, w.Info().VocabSize)
	}
	t.Run("an engine that is up", func(t *testing.T) {
		srv, err := sim.Start(simConfig(), "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Stop()
		reg := workers.NewRegistry()
		defer reg.Close()
		_, err = workers.Join(t.Context(), reg, srv.Addr(), workers.ConnectOptions{Admit: refuse}, nil)
		if !errors.Is(err, workers.ErrIncompatible) || !strings.Contains(err.Error(), "vocab_size 1000") {
			t.Fatalf("Join: %v; want Admit's refusal", err)
		}
		if n := len(reg.Snapshot()); n != 0 {
			t.Fatalf("%d workers registered; want none", n)
		}
		if _, err := workers.Join(t.Context(), reg, srv.Addr(), workers.ConnectOptions{}, nil); err != nil {
			t.Fatalf("Join without Admit: %v", err)
		}
	})
	t.Run("an engine that starts later", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		reg := workers.NewRegistry()
		defer reg.Close()
		lines := make(logLines, 64)
		addr := freeAddr(t)
		p, err := workers.Join(ctx, reg, addr, workers.ConnectOptions{Admit: refuse}, slog.New(lines))
		if err != nil {
			t.Fatal(err)
		}
		srv, err := sim.Start(simConfig(), addr)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Stop()
		waitLog(t, lines, "worker connected but not admitted")
		if w, ok := reg.Get(p.URL()); !ok || w != p || w.Connected() {
			t.Fatalf("registry holds %v (%v); want the placeholder", w, ok)
		}
	})
}
